from kernbench_cli.cli.app import main

main()
