from kernbench_cli.console import main

main()
