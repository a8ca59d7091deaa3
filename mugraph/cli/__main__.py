"""`python -m mugraph.cli`: the console command."""

from mugraph.cli import main

main()
