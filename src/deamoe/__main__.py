import signal
import sys

try:
    from deamoe.cli import main
except KeyboardInterrupt:  # Ctrl-C while the dispatcher itself loads: one line, as a moment later
    print("interrupted: python -m deamoe", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    status = main()
    # The command is done: a Ctrl-C while the interpreter shuts down ends the process as the
    # signal does by default, not with a traceback from whatever finaliser it lands in.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise SystemExit(status)
