#!/usr/bin/env bash
# package_test.sh STEP SOURCE_DIR BUILD_DIR WORK_DIR PLUGINS PYTHON
# One step of the installed-package test (tests/package/CMakeLists.txt).
# Every step after `install` runs from WORK_DIR/moved, a prefix that was
# installed somewhere else and then moved, with BALLAST_PLUGIN_PATH unset:
# the package must find its own plugins wherever it lies.
set -euo pipefail
step="$1" src="$2" build="$3" work="$4" plugins=",$5," python="$6"
moved="$work/moved"
unset BALLAST_PLUGIN_PATH
# Compilers are the consumer's choice; reuse ccache when it is there.
if command -v ccache >/dev/null; then export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache; fi

fail() { echo "FAIL: $*" >&2; exit 1; }
has_plugin() { [[ "$plugins" == *",$1,"* ]]; }

# Skips (exit 77) when this build has no Vulkan plugin or the machine no
# Vulkan device; fails when the plugin exists but was not FOUND.
need_vulkan() {
  has_plugin vulkan || { echo "skipped: the vulkan plugin is not built here"; exit 77; }
  local state
  state="$("$moved/bin/ballast" backends --load --json | "$python" -c \
    'import json,sys; print(next(b["state"] for b in json.load(sys.stdin)["backends"] if b["name"]=="vulkan"))')"
  [[ "$state" == "unavailable" ]] && { echo "skipped: no Vulkan device here"; exit 77; }
  [[ "$state" == "available" ]] || fail "vulkan is '$state' from the moved install"
}

# exports_only FILE SYMBOL: FILE's dynamic symbol table defines SYMBOL and
# nothing else (ballast_export_only): no weak C++ runtime instance of the
# plugin's binds to another copy in the process.
exports_only() {
  local got
  got="$(nm -D --defined-only "$1" | awk '{print $NF}' | sort -u | tr '\n' ' ')"
  [[ "$got" == "$2 " ]] || fail "$(basename "$1") exports more than $2: ${got:0:400}"
  echo "$(basename "$1"): exports $2 alone"
}

# The example engine, built once out of tree against the moved package
# (no C++ standard given); the steps that run it share the build.
build_engine() {
  engine_build="$work/engine-build"
  if [[ ! -x "$engine_build/engine" ]]; then
    cmake -S "$src/examples/engine" -B "$engine_build" -G Ninja -DCMAKE_PREFIX_PATH="$moved" >"$work/engine.configure.log" \
      || { cat "$work/engine.configure.log"; fail "configuring examples/engine"; }
    grep -q "ballast plugins: $moved/lib/ballast" "$work/engine.configure.log" || fail "ballast_PLUGIN_DIR is not $moved/lib/ballast"
    cmake --build "$engine_build" -j2
  fi
}

# The C example engine (examples/c_engine), built once out of tree against
# the moved package as a C99 project (no C++ compiler enabled).
build_c_engine() {
  c_engine_build="$work/c-engine-build"
  if [[ ! -x "$c_engine_build/c_engine" ]]; then
    cmake -S "$src/examples/c_engine" -B "$c_engine_build" -G Ninja -DCMAKE_PREFIX_PATH="$moved" >"$work/c_engine.configure.log" \
      || { cat "$work/c_engine.configure.log"; fail "configuring examples/c_engine"; }
    cmake --build "$c_engine_build" -j2
  fi
}

case "$step" in
install)
  rm -rf "$work"
  mkdir -p "$work"
  cmake --install "$build" --prefix "$work/staged" >"$work/install.log"
  # Moving the prefix is the point: nothing may remember where it was.
  mv "$work/staged" "$moved"
  ls "$moved/bin/ballast" "$moved/bin/ballast-conformance" "$moved/lib/cmake/ballast/ballastConfig.cmake" >/dev/null
  "$python" "$src/tools/gen/make_sample_model.py" "$work/model" 2>/dev/null
  # A llama-shaped GGUF (no ONNX graph) and an LLM-shaped ONNX model whose
  # row-parallel weights need the ranks' row maxima (numpy; skipped without).
  "$python" "$src/tools/gen/make_gguf_models.py" "$work/gguf" >/dev/null 2>&1 || echo "note: no GGUF models (numpy missing?)"
  "$python" "$src/tools/gen/make_llm_model.py" "$work/llm" --layers 2 --hidden 128 --ffn 256 --vocab 512 >/dev/null 2>&1 \
    || echo "note: no LLM-shaped model (python3-onnx or numpy missing?)"
  echo "installed to $work/staged, moved to $moved"
  ;;

runpaths)
  "$python" "$src/tools/check-runpaths" "$moved"
  # Every plugin and communicator library leaves its entry point alone visible.
  for p in "$moved"/lib/ballast/libballast-*.so; do if [[ -e "$p" ]]; then exports_only "$p" ballast_plugin_entry; fi; done
  for p in "$moved"/lib/ballast/libballast_comm_*.so; do if [[ -e "$p" ]]; then exports_only "$p" ballast_comm_entry; fi; done
  ;;

backends)
  # Each plugin resolves libballast through its own RUNPATH, from where it lies.
  for p in "$moved"/lib/ballast/libballast-*.so; do
    [[ -e "$p" ]] || continue
    got="$(ldd "$p" | sed -n 's/^\s*libballast\.so[^ ]* => \([^ ]*\).*/\1/p')"
    [[ "$got" == /* ]] && got="$(realpath -m "$got")"
    [[ "$got" == "$moved/lib/"* ]] || fail "$p resolves libballast to '$got', not into $moved/lib"
  done
  "$moved/bin/ballast" backends --load --json >"$work/backends.json"
  "$python" - "$work/backends.json" "$moved" "$work/staged" "$build" "$plugins" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
moved, staged, build, plugins = sys.argv[2:6]
by_name = {b["name"]: b for b in doc["backends"]}
path = doc["plugin_search_path"]
assert path and path[0] == moved + "/lib/ballast", f"search path starts {path}, expected {moved}/lib/ballast"
for p in path:
    assert not p.startswith(staged) and p != build + "/lib", f"search path remembers {p}"
for name in [p for p in plugins.split(",") if p]:
    b = by_name[name]
    assert b["state"] != "not found", f"{name}: not found from the moved install: {b['reason']}"
    assert b["library"].startswith(moved + "/lib/ballast/"), f"{name} loaded from {b['library']}"
    print(f"{name}: {b['state']} ({b['library']})")
if "vulkan" in plugins.split(","):
    v = by_name["vulkan"]
    assert v["state"] in ("available", "unavailable"), f"vulkan: {v['state']}: {v['reason']}"
    if v["state"] == "available":
        print("vulkan devices:", ", ".join(d["name"] for d in v["devices"]))
PY
  ;;

headers_gcc | headers_clang)
  cxx=g++
  [[ "$step" == headers_clang ]] && cxx=clang++
  command -v "$cxx" >/dev/null || { echo "skipped: $cxx not installed"; exit 77; }
  out="$work/$step"
  rm -rf "$out"
  cmake -S "$src/tests/package/headers" -B "$out" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_PREFIX_PATH="$moved" >"$out.configure.log" || { cat "$out.configure.log"; fail "configure"; }
  cmake --build "$out" -j2
  ;;

engine_cpu | engine_vulkan)
  backend="${step#engine_}"
  [[ "$backend" == vulkan ]] && need_vulkan
  build_engine
  "$engine_build/engine" "$work/model/sample.onnx" "$backend" | tee "$work/$step.log"
  grep -Eq '^[1-9][0-9]* derivations' "$work/$step.log" || fail "the engine derived nothing"
  grep -q "same values: ok" "$work/$step.log" || fail "the engine's paged pass did not finish"
  grep -q "counters back to baseline: ok" "$work/$step.log" || fail "no counter check"
  if [[ -f "$work/gguf/llama.gguf" ]]; then  # a model without a graph, opened by the same call
    "$engine_build/engine" "$work/gguf/llama.gguf" "$backend" blk. | tee "$work/$step.gguf.log"
    grep -Eq '^[1-9][0-9]* derivations' "$work/$step.gguf.log" || fail "the engine derived nothing from the GGUF model"
    grep -q "same values: ok" "$work/$step.gguf.log" || fail "the engine's paged pass of the GGUF model did not finish"
  fi
  ;;

engine_ranks)
  # The engine's tensor-parallel mode from the moved install: ranks as
  # threads, then (where Open MPI is installed and the mpi communicator was
  # built) an MPI job, whose library the install must find beside libballast.
  build_engine
  "$engine_build/engine" --ranks "$work/model/sample.onnx" local:2 cpu | tee "$work/$step.log"
  grep -q "ranks done: 2 in this process, counters back to baseline: ok" "$work/$step.log" || fail "the local ranks did not finish"
  if [[ -f "$work/llm/llm.onnx" ]]; then
    # o_proj and down_proj split by rows: their int8 rows need every rank's
    # maxima. A skipped derivation fails the engine (exit 1).
    "$engine_build/engine" --ranks "$work/llm/llm.onnx" local:2 cpu | tee "$work/$step.llm.log"
    grep -q "ranks done: 2 in this process, counters back to baseline: ok" "$work/$step.llm.log" \
      || fail "the local ranks of the LLM-shaped model did not finish"
    [[ "$(grep -c '; 0 skipped$' "$work/$step.llm.log")" == 2 ]] || fail "a rank skipped a derivation"
  fi
  if command -v mpirun >/dev/null && [[ -f "$moved/lib/ballast/libballast_comm_mpi.so" ]]; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe \
      "$engine_build/engine" --ranks "$work/model/sample.onnx" mpi cpu | tee "$work/$step.mpi.log"
    [[ "$(grep -c "ranks done: 1 in this process, counters back to baseline: ok" "$work/$step.mpi.log")" == 2 ]] \
      || fail "the MPI ranks did not finish"
  else
    echo "note: no mpirun or no mpi communicator: the MPI run is skipped"
  fi
  ;;

c_engine_cpu | c_engine_vulkan)
  backend="${step#c_engine_}"
  [[ "$backend" == vulkan ]] && need_vulkan
  build_c_engine
  "$c_engine_build/c_engine" "$work/model/sample.onnx" "$backend" | tee "$work/$step.log"
  grep -Eq '^derived [1-9][0-9]* of [1-9][0-9]*$' "$work/$step.log" || fail "the C engine derived nothing"
  grep -q ": 0 mismatches; first byte" "$work/$step.log" || fail "the value read back was not checked"
  grep -Eq '^cold start: [0-9]+ of [0-9]+ planned bytes read \([0-9]+ cached\), [1-9][0-9]* derived' \
    "$work/$step.log" || fail "the C engine's cold start loaded nothing"
  grep -q "counters back to baseline: ok" "$work/$step.log" || fail "no counter check"
  grep -q "^c engine: ok$" "$work/$step.log" || fail "the C engine did not finish"
  if [[ -f "$work/gguf/llama.gguf" ]]; then  # no 2-D float32 weight to transpose: the check says so
    "$c_engine_build/c_engine" "$work/gguf/llama.gguf" "$backend" blk. | tee "$work/$step.gguf.log"
    grep -q "^read-back check: none" "$work/$step.gguf.log" || fail "the C engine did not say why it read nothing back"
    grep -q "^c engine: ok$" "$work/$step.gguf.log" || fail "the C engine did not finish the GGUF model"
  fi
  ;;

rust_engine)
  # examples/rust_engine: hand-written extern "C" declarations of ballast.h,
  # no crates, so cargo builds it offline against the moved install. --locked:
  # Cargo.lock (format 3, which Debian 12's cargo reads) is never rewritten.
  command -v cargo >/dev/null || { echo "skipped: cargo not installed"; exit 77; }
  BALLAST_LIB_DIR="$moved/lib" cargo build --offline --locked --release --quiet \
    --manifest-path "$src/examples/rust_engine/Cargo.toml" --target-dir "$work/rust-build"
  "$work/rust-build/release/rust_engine" "$work/model/sample.onnx" cpu | tee "$work/$step.log"
  grep -Eq '^derived [1-9][0-9]* of [1-9][0-9]*$' "$work/$step.log" || fail "the Rust engine derived nothing"
  grep -q ": 0 mismatches$" "$work/$step.log" || fail "the value read back was not checked"
  grep -q "^rust engine: ok$" "$work/$step.log" || fail "the Rust engine did not finish"
  ;;

conformance_cpu | conformance_vulkan)
  backend="${step#conformance_}"
  [[ "$backend" == vulkan ]] && need_vulkan
  "$moved/bin/ballast" conformance --backend "$backend" >"$work/$step.log" 2>&1 || { cat "$work/$step.log"; fail "conformance on $backend"; }
  sed -n '/==== ballast conformance summary/,$p' "$work/$step.log"
  grep -q "^result:   passed" "$work/$step.log" || fail "no passing summary"
  "$moved/bin/ballast" conformance --backend "$backend" --json -- -tc='device weights*' 2>/dev/null >"$work/$step.json"
  "$python" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["result"]=="passed" and d["passed"]>=2 and d["device"]["uuid"], d' "$work/$step.json"
  ;;

plugin_loopback)
  # A third-party backend: built out of tree against the moved package's
  # plugin SDK (tests/package/plugin), dropped into a folder of its own as
  # libballast-loopback.so, and found there with no change to ballast.
  out="$work/plugin-build" plugins_dir="$work/third-party-plugins"
  rm -rf "$out" "$plugins_dir"
  cmake -S "$src/tests/package/plugin" -B "$out" -G Ninja -DCMAKE_PREFIX_PATH="$moved" >"$work/plugin.configure.log" \
    || { cat "$work/plugin.configure.log"; fail "configuring the loopback plugin against the plugin SDK"; }
  cmake --build "$out" -j2
  mkdir -p "$plugins_dir"
  cp "$out/libballast-loopback.so" "$plugins_dir/"
  exports_only "$plugins_dir/libballast-loopback.so" ballast_plugin_entry  # ballast_add_plugin's version script
  # A symbol nothing provides fails the plugin's build (--no-undefined), not its first load.
  if cmake -S "$src/tests/package/plugin" -B "$work/plugin-undefined" -G Ninja -DCMAKE_PREFIX_PATH="$moved" \
       -DLOOPBACK_UNDEFINED=ON >"$work/plugin-undefined.log" 2>&1 \
     && cmake --build "$work/plugin-undefined" -j2 >>"$work/plugin-undefined.log" 2>&1; then
    fail "a plugin using a symbol nothing provides (loopback_nowhere) built"
  fi
  grep -q "loopback_nowhere" "$work/plugin-undefined.log" \
    || { cat "$work/plugin-undefined.log"; fail "the failed build does not name loopback_nowhere"; }
  # ... but not under a sanitizer, given to the target after
  # ballast_add_plugin: clang leaves its runtime out of a module, for the
  # program to provide (gcc links it in, so only clang can tell).
  if command -v clang++ >/dev/null 2>&1; then
    rm -rf "$work/plugin-sanitized"
    cmake -S "$src/tests/package/plugin" -B "$work/plugin-sanitized" -G Ninja -DCMAKE_PREFIX_PATH="$moved" \
      -DCMAKE_CXX_COMPILER=clang++ -DLOOPBACK_SANITIZE=ON >"$work/plugin-sanitized.log" 2>&1 \
      && cmake --build "$work/plugin-sanitized" -j2 >>"$work/plugin-sanitized.log" 2>&1 \
      || { cat "$work/plugin-sanitized.log"; fail "a plugin with -fsanitize in its target's options did not build"; }
  fi
  # The SDK is a component: asking for one the package does not have fails,
  # and so does asking for plugin_sdk from an install without it.
  if cmake -S "$src/tests/package/plugin" -B "$work/plugin-bogus" -G Ninja -DCMAKE_PREFIX_PATH="$moved" \
       -DLOOPBACK_EXTRA_COMPONENT=no_such_component >"$work/plugin-bogus.log" 2>&1; then
    fail "find_package(ballast COMPONENTS no_such_component) succeeded"
  fi
  rm -rf "$work/no-sdk" "$work/plugin-no-sdk"
  cmake --install "$build" --prefix "$work/no-sdk" --component Unspecified >"$work/no-sdk.log"
  [[ -e "$work/no-sdk/include/ballast/backend_registry.hpp" ]] || fail "the default component lacks the public headers"
  [[ ! -e "$work/no-sdk/include/ballast/plugin_abi.hpp" ]] || fail "plugin_abi.hpp installed outside the plugin_sdk component"
  [[ ! -e "$work/no-sdk/include/ballast/plugin_api.h" ]] || fail "plugin_api.h installed outside the plugin_sdk component"
  if cmake -S "$src/tests/package/plugin" -B "$work/plugin-no-sdk" -G Ninja -DCMAKE_PREFIX_PATH="$work/no-sdk" \
       >"$work/plugin-no-sdk.log" 2>&1; then
    fail "find_package(ballast COMPONENTS plugin_sdk) succeeded on an install without the SDK"
  fi

  # (a) `ballast backends` lists it, after the first-party names, as available.
  BALLAST_PLUGIN_PATH="$plugins_dir" "$moved/bin/ballast" backends --load --json >"$work/plugin_backends.json"
  "$moved/bin/ballast" backends --load --json >"$work/plugin_backends_without.json"
  "$python" - "$work/plugin_backends.json" "$work/plugin_backends_without.json" "$plugins_dir" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
without = json.load(open(sys.argv[2]))
plugins_dir = sys.argv[3]
names = [b["name"] for b in doc["backends"]]
assert names[:4] == ["cpu", "cuda", "hip", "vulkan"], names
assert "loopback" in names[4:], f"loopback not listed: {names}"
b = doc["backends"][names.index("loopback")]
assert b["state"] == "available", f"loopback is {b['state']}: {b['reason']}"
assert b["library"] == plugins_dir + "/libballast-loopback.so", b["library"]
assert b["devices"] and b["devices"][0]["name"], b
assert b["capabilities"]["max_single_allocation"] > 0, b
assert doc["plugin_search_path"][0] == plugins_dir, doc["plugin_search_path"]
assert "loopback" not in [x["name"] for x in without["backends"]], "loopback listed without its folder"
print("loopback:", b["state"], b["library"], "device:", b["devices"][0]["name"])
PY
  BALLAST_PLUGIN_PATH="$plugins_dir" "$moved/bin/ballast" backends --load >"$work/plugin_backends.txt"
  grep -q '^loopback: available' "$work/plugin_backends.txt" || fail "the text listing does not show loopback as available"

  # (b) an engine derives through it, (c) the conformance suite passes on it.
  build_engine
  BALLAST_PLUGIN_PATH="$plugins_dir" "$engine_build/engine" "$work/model/sample.onnx" loopback | tee "$work/$step.engine.log"
  grep -Eq '^[1-9][0-9]* derivations' "$work/$step.engine.log" || fail "the engine derived nothing through loopback"
  grep -q "counters back to baseline: ok" "$work/$step.engine.log" || fail "no counter check"
  # Every case but "device info": loopback's devices are the CPU's, which
  # name their backend "cpu", and that case rightly wants "loopback".
  BALLAST_PLUGIN_PATH="$plugins_dir" "$moved/bin/ballast" conformance --backend loopback -- -tce='device info*' \
    >"$work/$step.conformance.log" 2>&1 \
    || { cat "$work/$step.conformance.log"; fail "conformance on loopback"; }
  sed -n '/==== ballast conformance summary/,$p' "$work/$step.conformance.log"
  grep -q "^result:   passed" "$work/$step.conformance.log" || fail "no passing summary"
  ;;

python_inspect)
  # `python3 -m ballast inspect` from the moved prefix: only its
  # dist-packages on the path, run from elsewhere, no BALLAST_* variable.
  unset BALLAST_LIBRARY
  site="$moved/lib/python3/dist-packages"
  [[ -f "$site/ballast/__init__.py" && -f "$site/ballast/__main__.py" ]] || fail "the module is not installed in $site"
  (cd / && PYTHONPATH="$site" "$python" -m ballast inspect "$work/model/sample.onnx") | tee "$work/$step.log"
  grep -Eq '^model: .*sample\.onnx \(onnx\), 12 weights$' "$work/$step.log" || fail "no model line"
  grep -Eq '^  layer0\.weight +float +\[256, 512\] +524288 B ' "$work/$step.log" || fail "layer0.weight not listed as stored"
  grep -Eq '^accounting: mapped [1-9][0-9]* B, referenced [1-9][0-9]* B, .*dead [1-9][0-9]* B in 1 range' "$work/$step.log" \
    || fail "no accounting line"
  # The same weights and accounting as `ballast inspect --json`.
  (cd / && PYTHONPATH="$site" "$python" -m ballast inspect --json "$work/model/sample.onnx") >"$work/$step.json"
  "$moved/bin/ballast" inspect "$work/model/sample.onnx" --json >"$work/$step.cli.json"
  "$python" - "$work/$step.json" "$work/$step.cli.json" <<'PY'
import json, sys
py, cli = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
def key(w):  # the CLI names no file or offset for a weight inline in the model file
    external = w.get("location", "external") == "external" and w.get("file")
    return (w["name"], w["dtype"], list(w["dims"]), w["bytes"], w["file"] if external else "",
            w["offset"] if external else 0)
differ = [(a, b) for a, b in zip(map(key, py["weights"]), map(key, cli["weights"])) if a != b]
assert len(py["weights"]) == len(cli["weights"]) and not differ, differ[:1]
acc, files = py["accounting"], cli["external_files"]
assert acc["mapped_bytes"] == sum(f["mapped_bytes"] for f in files), acc
assert acc["referenced_bytes"] == sum(f["referenced_bytes"] for f in files), acc
assert acc["dead_bytes"] == sum(f["unreferenced_bytes"] for f in files), acc
assert [(r["file"], r["offset"], r["length"]) for r in acc["dead_ranges"]] == \
    [(f["path"], o, n) for f in files for o, n in f["dead_ranges"]], acc["dead_ranges"]
print("python inspect: 12 weights, accounting as the CLI's")
PY
  # The CLI's error line and exit code (2), from the moved install too.
  rc=0
  (cd / && PYTHONPATH="$site" "$python" -m ballast inspect "$work/no-such.onnx" 2>"$work/$step.err") || rc=$?
  [ "$rc" = 2 ] || fail "inspect of a missing model: exit $rc, not 2"
  grep -q "^ballast inspect: not_found: .*no-such.onnx" "$work/$step.err" || fail "no error message: $(cat "$work/$step.err")"
  ;;

python_numpy | python_torch | python_release | python_misuse | python_names | python_conformance | python_vulkan)
  [[ "$step" == python_vulkan ]] && need_vulkan
  unset BALLAST_LIBRARY
  (cd / && PYTHONPATH="$moved/lib/python3/dist-packages" "$python" "$src/tests/package/python_module.py" \
    "${step#python_}" "$moved" "$work/model/sample.onnx" "$work")
  ;;

*) fail "unknown step $step" ;;
esac
