"""`python -m corral` runs the CLI."""

from corral.cli import main

main()
