"""`python -m mugraph`: the console command."""

from mugraph.cli import main

main()
