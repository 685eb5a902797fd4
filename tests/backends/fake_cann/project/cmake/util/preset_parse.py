"""Stand-in for the op project's cmake/util/preset_parse.py: CMakePresets.json's cache variables as -D options."""
import json
import os
import sys

config = json.load(open(sys.argv[1]))
source = os.path.abspath(os.path.dirname(sys.argv[1]))
opts = []
for node in config.get("configurePresets", []):
    for key, value in (node.get("cacheVariables") or {}).items():
        opts.append(f"-D{key}={value['value']}".replace("${sourceDir}", source))
print(" ".join(opts))
