"""The `python -m deamoe` commands, one module per stage: each parses its flags, loads and checks
the config (deamoe.settings) and calls its stage's library.  Commands sit above every stage and
the config layer; no stage package imports them or the config loader."""
