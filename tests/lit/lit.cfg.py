# lit configuration: every .tsl and .test file under tests/lit is a test.
import os
import lit.formats

config.name = "tessel"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".tsl", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(os.path.dirname(config.tessel_bin), "tests", "lit-out")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]
config.environment["PATH"] = os.pathsep.join(
    [os.path.dirname(config.tessel_bin), config.llvm_tools, config.environment.get("PATH", "/usr/bin:/bin")])
# A sanitized build (make asan-test) runs everything ten times slower: a
# test whole models dominate says `UNSUPPORTED: sanitized` and runs in the
# plain build only, its smaller cases staying in a test the sanitizers see.
if getattr(config, "sanitized", "").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("sanitized")
config.substitutions.append(("%python3", config.python3))
config.substitutions.append(("%inputs", os.path.join(os.path.dirname(__file__), "Inputs")))
config.substitutions.append(("%srcroot", config.source_root))
config.substitutions.append(("%exit2", os.path.join(os.path.dirname(__file__), "Inputs", "exit2.sh")))
config.substitutions.append(("%exit3", os.path.join(os.path.dirname(__file__), "Inputs", "exit3.sh")))
