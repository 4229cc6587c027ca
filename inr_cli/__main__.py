from inr_cli.cli import main

main()
