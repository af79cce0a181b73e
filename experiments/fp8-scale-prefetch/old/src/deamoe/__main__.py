import signal

from deamoe.cli import main

if __name__ == "__main__":
    status = main()
    # The command is done: a Ctrl-C while the interpreter shuts down ends the process as the
    # signal does by default, not with a traceback from whatever finaliser it lands in.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise SystemExit(status)
