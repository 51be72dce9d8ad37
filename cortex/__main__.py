"""`python -m cortex`: the same as the `cortex` command."""

from cortex.cli import main

if __name__ == "__main__":
    main()
