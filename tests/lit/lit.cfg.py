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
# tessel run under mpirun (tests/lit/e2e/chips_mpi.test): OpenMPI refuses
# root (CI runs as root) unless told, and two cores take four ranks only
# with --oversubscribe. The sanitizers report OpenMPI's own leaks, so a
# sanitized build leaves it to test_chips, which plays the ranks in one process.
import shutil
if shutil.which("mpirun"):
    config.available_features.add("mpi")
    config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
config.substitutions.append(("%python3", config.python3))
config.substitutions.append(("%inputs", os.path.join(os.path.dirname(__file__), "Inputs")))
config.substitutions.append(("%srcroot", config.source_root))
config.substitutions.append(("%exit2", os.path.join(os.path.dirname(__file__), "Inputs", "exit2.sh")))
config.substitutions.append(("%exit3", os.path.join(os.path.dirname(__file__), "Inputs", "exit3.sh")))
