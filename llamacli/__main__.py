"""`python -m llamacli` runs the `llama` command."""

from llamacli.cli import main

if __name__ == "__main__":
    main()
