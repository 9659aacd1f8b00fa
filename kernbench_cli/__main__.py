from kernbench_cli.entry import main

main()
