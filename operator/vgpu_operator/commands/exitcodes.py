"""One exit-code table for every `vgpu-operator` and `kubectl vgpu` command, shown in each
command's `--help` (EPILOG) and in the docs, and the one place a user error becomes a message
and a code instead of a traceback (`user_error`)."""

from __future__ import annotations

import os
import sys

OK = 0  # clean: nothing found, nothing would change, done
FINDINGS = 1  # findings or changes (validate: an invalid document)
USAGE = 2  # a wrong option or argument, or a file that is not what the command takes
CANNOT = 3  # cannot reach or cannot read: the cluster, the kubeconfig, a file

EPILOG = """exit codes (the same for every command):
  0  clean: nothing found, nothing would change, done
  1  findings or changes: doctor found a problem, plan would change something,
     cleanup left something behind, validate found an invalid document
  2  usage: a wrong option or argument, or a file that is not what the command
     takes (invalid YAML, an invalid operator configuration or policy; what
     validate checks is its finding, 1)
  3  cannot reach or cannot read: no credentials, the apiserver unreachable (each
     request gives up after 30 s) or refusing a read, a missing or unreadable file
"""

DEBUG_ENV = "VGPU_OPERATOR_DEBUG"  # set to 1: an unexpected error shows its traceback


def user_error(prog: str, exc: BaseException) -> int:
    """Print one line (or a few, for a configuration's problems) for `exc` and return its exit
    code. Anything the table does not name is reported as CANNOT, without a traceback unless
    VGPU_OPERATOR_DEBUG=1."""
    import yaml

    from vgpu_operator import kubeapi
    from vgpu_operator.kubeapi.credentials import CredentialsError
    from vgpu_operator.models.config_errors import ConfigError

    if isinstance(exc, ConfigError):
        code, message = USAGE, f"invalid configuration:\n{exc}"
    elif isinstance(exc, yaml.YAMLError):
        code, message = USAGE, f"not valid YAML: {exc}"
    elif isinstance(exc, (CredentialsError, kubeapi.Unreachable)):
        code, message = CANNOT, f"cannot reach the cluster: {exc}"
    elif isinstance(exc, kubeapi.ApiError):
        code, message = CANNOT, f"the apiserver refused a request: {exc}"
    elif isinstance(exc, FileNotFoundError):
        code, message = CANNOT, f"cannot read {exc.filename}: no such file"
    elif isinstance(exc, OSError):
        code, message = CANNOT, f"cannot read: {exc}"
    else:
        if os.environ.get(DEBUG_ENV) == "1":
            raise exc
        code = CANNOT
        message = (
            f"unexpected error: {type(exc).__name__}: {exc} "
            f"({DEBUG_ENV}=1 shows the traceback; please report it)"
        )
    print(f"{prog}: {message}", file=sys.stderr)
    return code
