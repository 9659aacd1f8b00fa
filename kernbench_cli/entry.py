"""The `kernbench` console script: the CLI (`cli.app.main`), with a Ctrl-C that lands while
it is still being imported (typer, the command modules) ending as any other does:
`interrupted`, exit 130, no traceback."""

import sys


def main() -> None:
    try:
        from kernbench_cli.cli.app import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    cli_main()
