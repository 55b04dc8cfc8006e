"""An exec credential plugin for the simulated cluster: prints an ExecCredential with a short-lived token.

Used from a kubeconfig ``users[].user.exec`` (see :func:`~.auth.exec_user`), as ``aws eks get-token`` is
on EKS::

    python -m airflow_jobs_sim.mint_token --ttl 10 [--secret-file PATH]

The signing secret is the simulator's ``token`` (``airflow-jobs-sim --token-ttl``), read from
``--secret-file`` or the ``AJP_SIM_TOKEN_SECRET`` environment variable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from airflow_jobs_sim.auth import EXEC_API_VERSION, SECRET_ENV, exec_credential, mint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_jobs_sim.mint_token")
    parser.add_argument("--ttl", type=float, required=True, help="token lifetime in seconds")
    parser.add_argument("--secret-file", default=None, help="file holding the signing secret")
    args = parser.parse_args(argv)
    # The client says which ExecCredential version it reads (client-go's KUBERNETES_EXEC_INFO).
    info = os.environ.get("KUBERNETES_EXEC_INFO")
    if info:
        wanted = json.loads(info).get("apiVersion")
        if wanted != EXEC_API_VERSION:
            print(
                f"mint_token: only {EXEC_API_VERSION} is supported, the client asked for {wanted}",
                file=sys.stderr,
            )
            return 1
    if args.secret_file:
        with open(args.secret_file, encoding="utf-8") as fh:
            secret = fh.read().strip()
    else:
        secret = os.environ.get(SECRET_ENV, "")
    if not secret:
        print(f"mint_token: no secret: pass --secret-file or set {SECRET_ENV}", file=sys.stderr)
        return 1
    token, expires = mint(secret, args.ttl, time.time())
    json.dump(exec_credential(token, expires), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
