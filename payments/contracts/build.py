"""Compile the dev chain's contracts with solc (npm's solcjs) into artifacts.json.

Run ``python payments/contracts/build.py`` after changing a .sol file; the test suite
checks that artifacts.json is what the sources compile to.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ARTIFACTS = HERE / "artifacts.json"
CONTRACTS = ("TestToken", "MockPriceFeed", "Forwarder")

_COMPILE = """
const solc = require('solc');
let input = '';
process.stdin.on('data', c => input += c);
process.stdin.on('end', () => process.stdout.write(solc.compile(input)));
"""


def compile_contracts() -> dict[str, dict[str, object]]:
    sources = {f"{name}.sol": {"content": (HERE / f"{name}.sol").read_text()} for name in CONTRACTS}
    request = {
        "language": "Solidity",
        "sources": sources,
        "settings": {
            "optimizer": {"enabled": True, "runs": 200},
            "evmVersion": "cancun",
            "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object"]}},
        },
    }
    result = subprocess.run(
        ["node", "-e", _COMPILE],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    output = json.loads(result.stdout)
    errors = [e for e in output.get("errors", []) if e["severity"] == "error"]
    if errors:
        raise RuntimeError("\n".join(e["formattedMessage"] for e in errors))
    return {
        name: {
            "abi": output["contracts"][f"{name}.sol"][name]["abi"],
            "bytecode": "0x"
            + output["contracts"][f"{name}.sol"][name]["evm"]["bytecode"]["object"],
        }
        for name in CONTRACTS
    }


def main() -> int:
    ARTIFACTS.write_text(json.dumps(compile_contracts(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {ARTIFACTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
