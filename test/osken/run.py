"""Run nagare's os-ken L2 switch (l2switch.py) listening on 127.0.0.1:PORT.

    python run.py PORT [-v]

Logs go to stderr. This is what osken-manager would do, for os-ken
releases that ship no manager script.
"""

import logging
import os
import sys

from os_ken import cfg
from os_ken.base import app_manager
import os_ken.controller.controller  # noqa: F401  registers the ofp-* options


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: run.py PORT [-v]")
    port = int(sys.argv[1])
    level = logging.DEBUG if "-v" in sys.argv[2:] else logging.INFO
    logging.basicConfig(stream=sys.stderr, level=level,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    cfg.CONF(args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port", str(port)],
             project="os_ken", default_config_files=[])
    app = os.path.join(os.path.dirname(os.path.abspath(__file__)), "l2switch.py")
    app_manager.AppManager.run_apps([app])


if __name__ == "__main__":
    main()
