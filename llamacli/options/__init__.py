"""The commands' options: their declarations (llama.cpp's names and defaults), their parsing and
validation, and what they become (SamplingParams, ModelSource, the server's configs, ...).

`groups.py` is the mechanism: a group of `Opt`s built into one value by a decorator that
shows the options in the command's --help. The command modules in llamacli/commands/ keep
only their commands.
"""
