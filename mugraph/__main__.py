"""`python -m mugraph`: the console command."""

from mugraph.cli_entry import main

main()
