#!/usr/bin/env bash
# Installs each artifact scripts/package left in dist/ where no compiler
# exists, and runs that face's README quick start against a throwaway
# redis-server (a free 127.0.0.1 port) and a Local file:
#
#   - Python: a fresh venv, `pip install --no-index --only-binary=:all:
#     --find-links dist mistri-locks`; the installed _native.abi3.so is the
#     wheel's (same sha256 as its RECORD); mypy stubtest against the
#     installed wheel (in a second venv that also has mypy); the wheel
#     imported on every CPython >= 3.9 found here.
#   - Ruby: a fresh GEM_HOME, `gem install --local` of the platform gem;
#     nothing compiled (no extensions/ folder), the loaded extension is the
#     gem's lib/mistri_locks/<minor>/mistri_locks.so; the gem's RBS
#     signatures validated (`rbs validate`) and checked against the loaded
#     library by reflection (tests/packaging/rbs_coverage.rb).
#   - C and the CLI: the tarball unpacked elsewhere; the quick start
#     compiled against it via pkg-config (gcc by absolute path: a C user
#     needs a compiler for their own program) and run with no compiler on
#     PATH; the tarball's mistri-locks shows the C hold and stops it.
#   - Node: a fresh project, `npm install --offline` of both npm tarballs
#     (mistri-locks and its optional dependency @mistri-locks/linux-x64-gnu)
#     in one command with the registry unreachable; npm fetched nothing,
#     the addon loaded is the platform package's prebuilt .node (same
#     sha256), and tests/packaging/quickstart.mjs holds, is stopped from
#     another process and releases, on Redis and Local. Without the
#     platform package, importing mistri-locks fails with MISTRI_NO_ADDON
#     naming both places it looked.
#   - One version: the workspace Cargo.toml's, in every artifact's name,
#     version.rb, CHANGELOG.md, the wheel's metadata and __version__,
#     MistriLocks::VERSION, mistri_version(), MISTRI_LOCKS_VERSION,
#     pkg-config --modversion and `mistri-locks --version`.
#
# The installs and quick starts run with PATH set to a folder of links to
# just the tools they need (python3, ruby, gem, redis-server, tar, sh,
# pkg-config, ...): cargo, rustc, cc, gcc, c++, clang and make are checked
# to be absent from it.
#
#   scripts/package && tests/packaging/run.sh
#   PACKAGING_FROM_SOURCE=1 tests/packaging/run.sh   # also times the sdist and
#                                                     # source-gem installs (compiles)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dist="$root/dist"
cd "$root"

say() { printf '\n==> %s\n' "$*"; }
die() { echo "tests/packaging/run.sh: FAIL: $*" >&2; exit 1; }
passed=0
ok() { passed=$((passed + 1)); echo "   ok: $*"; }

work="$(mktemp -d "${TMPDIR:-/tmp}/mistri-packaging.XXXXXX")"
redis_pid=""
cleanup() {
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

version="$(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "mistri_locks_core"))')"
python_exe="$(python3 -c 'import sys; print(sys.executable)')"
ruby_exe="$(ruby -e 'print RbConfig.ruby')"
minor="$(ruby -e 'print RUBY_VERSION[/\A\d+\.\d+/]')"

say "the artifacts of version $version (the workspace Cargo.toml)"
wheel="$(ls "$dist"/mistri_locks-"$version"-cp39-abi3-*manylinux_2_17_x86_64.whl)" || die "no abi3 wheel for $version in dist/"
platform_gem="$dist/mistri_locks-$version-x86_64-linux.gem"
source_gem="$dist/mistri_locks-$version.gem"
sdist="$dist/mistri_locks-$version.tar.gz"
tarball="$dist/mistri_locks-$version-x86_64-linux-gnu.tar.gz"
npm_tgz="$dist/mistri-locks-$version.tgz"
npm_platform_tgz="$dist/mistri-locks-linux-x64-gnu-$version.tgz"
for f in "$wheel" "$platform_gem" "$source_gem" "$sdist" "$tarball" "$npm_tgz" "$npm_platform_tgz"; do
  [ -f "$f" ] || die "dist/ lacks $(basename "$f") (run scripts/package)"
  printf '   %8s  %s\n' "$(du -h --apparent-size "$f" | cut -f1)" "$(basename "$f")"
done
[ "$(ls "$dist" | wc -l)" -eq 7 ] || die "dist/ holds other versions or files: $(ls "$dist" | tr '\n' ' ')"
rb_version="$(ruby -r ./bindings/ruby/lib/mistri_locks/version -e 'print MistriLocks::VERSION')"
[ "$rb_version" = "$version" ] || die "bindings/ruby/lib/mistri_locks/version.rb says $rb_version, Cargo.toml $version"
grep -q "^## \[$version\]" CHANGELOG.md || die "CHANGELOG.md has no section for $version"
ok "file names, version.rb and CHANGELOG.md say $version"

# The PATH the installs run with: links to these tools and nothing else.
bin="$work/bin"
mkdir -p "$bin"
for tool in sh bash env cat cp mv ls mkdir rm rmdir ln chmod grep sed awk tr cut head tail sort uniq wc \
            find xargs dirname basename readlink realpath mktemp sleep date id uname touch test true false \
            tar gzip pkg-config redis-server redis-cli gem ruby node npm; do
  real="$(command -v "$tool")" || die "no $tool on this machine"
  ln -s "$real" "$bin/$tool"
done
ln -s "$python_exe" "$bin/python3"
for compiler in cargo rustc cc gcc c++ g++ clang make ld; do
  if PATH="$bin" command -v "$compiler" >/dev/null 2>&1; then die "$compiler is on the install PATH"; fi
done
ok "install PATH ($bin) has no cargo, rustc, cc, gcc, c++, clang, make or ld"
nocc() { env -i HOME="$work/home" LANG=C.UTF-8 PATH="$bin" "$@"; }
mkdir -p "$work/home"

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$port" ping >/dev/null || die "redis-server did not start"
redis_url="redis://127.0.0.1:$port/0"
local_path="$work/local/locks.db"
mkdir -p "$work/local"

# ---------------------------------------------------------------- Python
say "Python: pip install --no-index --only-binary=:all: --find-links dist mistri-locks (fresh venv, no compiler)"
started=$(date +%s.%N)
nocc python3 -m venv "$work/py"
venv_at=$(date +%s.%N)
nocc "$work/py/bin/python" -m pip install -q --no-index --only-binary=:all: --find-links "$dist" mistri-locks \
  >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; die "pip install of the wheel failed"; }
py_install=$(python3 -c "print(f'{$(date +%s.%N) - $venv_at:.1f}')")
ok "installed in $py_install s (venv created in $(python3 -c "print(f'{$venv_at - $started:.1f}')") s)"
(cd "$work" && nocc "$work/py/bin/python" - "$wheel" "$version" <<'PY') || die "the installed module is not the wheel's"
import base64, csv, hashlib, importlib.metadata as md, io, os, sys, sysconfig, zipfile
import mistri_locks, mistri_locks._native as native
wheel, version = sys.argv[1], sys.argv[2]
site = os.path.realpath(sysconfig.get_paths()["platlib"])
so = os.path.realpath(native.__file__)
assert so.startswith(site + os.sep), (so, site)
assert os.path.basename(so) == "_native.abi3.so", so
with zipfile.ZipFile(wheel) as z:
    record = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))).decode()
want = next(row[1] for row in csv.reader(io.StringIO(record)) if row[0] == "mistri_locks/_native.abi3.so")
got = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(open(so, "rb").read()).digest()).rstrip(b"=").decode()
assert got == want, (got, want)
assert md.version("mistri-locks") == version, md.version("mistri-locks")
assert mistri_locks.__version__ == version, mistri_locks.__version__
print(f"   {so}: the wheel's own file (sha256 as in its RECORD); mistri_locks.__version__ {version}")
PY
ok "the imported extension is the wheel's _native.abi3.so, inside the venv"
[ ! -e "$work/py/target" ] && ! find "$work" -name 'target' -type d -o -name '*.rlib' | grep -q . ||
  die "a build happened (target/ or .rlib under $work)"
for url in "$redis_url" "$local_path"; do
  out="$(cd "$work" && nocc "$work/py/bin/python" "$here/quickstart.py" "$url")" || die "Python quick start on $url: $out"
  grep -q '^HELD [0-9]' <<<"$out" && grep -q '^STOPPED stop flag' <<<"$out" || die "Python quick start on $url said: $out"
  ok "Python quick start on ${url/$work/\$work}: $(tr '\n' ' ' <<<"$out")"
done

say "Python: mypy stubtest against the installed wheel"
python3 -m venv "$work/typing"
"$work/typing/bin/python" -m pip install -q "mypy>=1.18,<3" >"$work/mypy-install.log" 2>&1 ||
  { cat "$work/mypy-install.log"; die "pip install mypy failed"; }
nocc "$work/typing/bin/python" -m pip install -q --no-index --only-binary=:all: --find-links "$dist" mistri-locks \
  >>"$work/mypy-install.log" 2>&1 || { cat "$work/mypy-install.log"; die "pip install of the wheel (typing venv) failed"; }
site="$("$work/typing/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
for f in py.typed _native.pyi; do [ -f "$site/mistri_locks/$f" ] || die "the wheel lacks mistri_locks/$f"; done
(cd "$work" && nocc "$work/typing/bin/python" -m mypy.stubtest mistri_locks._native >"$work/stubtest.log" 2>&1) ||
  { cat "$work/stubtest.log"; die "stubtest against the installed wheel"; }
ok "py.typed and _native.pyi ship; stubtest: $(tail -1 "$work/stubtest.log")"

say "Python: the abi3 wheel on every CPython >= 3.9 here"
declare -A seen_py=()
pythons=()
for exe in /usr/bin/python3.* /root/.pyenv/versions/*/bin/python3 /usr/local/bin/python3.*; do
  [ -x "$exe" ] && [[ "$exe" != *-config ]] || continue
  v="$("$exe" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3] if sys.version_info >= (3, 9) and sys.implementation.name == "cpython" else "")' 2>/dev/null)" || continue
  [ -n "$v" ] && [ -z "${seen_py[$v]:-}" ] || continue
  "$exe" -c 'import ensurepip, venv' 2>/dev/null || { echo "   (skipping $exe: no venv module)"; continue; }
  seen_py[$v]=1
  pythons+=("$v=$exe")
done
[ ${#pythons[@]} -ge 1 ] || die "no CPython >= 3.9 found"
imported=()
for entry in "${pythons[@]}"; do
  v="${entry%%=*}" exe="${entry#*=}"
  nocc "$exe" -m venv --without-pip "$work/py-$v"
  nocc "$python_exe" -m pip --python "$work/py-$v/bin/python" install -q --no-index --only-binary=:all: \
    --find-links "$dist" mistri-locks >"$work/pip-$v.log" 2>&1 || { cat "$work/pip-$v.log"; die "pip install on $v"; }
  (cd "$work" && nocc "$work/py-$v/bin/python" -c '
import sys, mistri_locks, mistri_locks._native as n
a = mistri_locks.open(sys.argv[1])
assert a.acquire("py-" + sys.version.split()[0], 5) is True
assert a.new_owner().acquire("py-" + sys.version.split()[0], 5) is False
assert "/py-" in n.__file__' "$redis_url") || die "the wheel does not work on CPython $v ($exe)"
  imported+=("$v")
done
ok "the wheel imports and holds a lease on CPython ${imported[*]}"

# ---------------------------------------------------------------- Ruby
say "Ruby: gem install --local $(basename "$platform_gem") (fresh GEM_HOME, no compiler)"
gem_home="$work/gems"
started=$(date +%s.%N)
nocc env GEM_HOME="$gem_home" GEM_PATH="$gem_home" gem install --local --no-document "$platform_gem" \
  >"$work/gem.log" 2>&1 || { cat "$work/gem.log"; die "gem install of the platform gem failed"; }
gem_install=$(python3 -c "print(f'{$(date +%s.%N) - $started:.1f}')")
ok "installed in $gem_install s"
gem_dir="$gem_home/gems/mistri_locks-$version-x86_64-linux"
[ -f "$gem_dir/lib/mistri_locks/$minor/mistri_locks.so" ] || die "no lib/mistri_locks/$minor/mistri_locks.so in the gem"
[ -z "$(find "$gem_home/extensions" -type f 2>/dev/null)" ] || die "gem install built an extension (files under $gem_home/extensions)"
[ ! -e "$gem_dir/ext" ] && [ ! -e "$gem_dir/lib/mistri_locks/mistri_locks.so" ] || die "the platform gem carries a source build"
rb() { nocc env GEM_HOME="$gem_home" GEM_PATH="$gem_home" ruby "$@"; }
loaded="$(cd "$work" && rb -e 'require "mistri_locks"; print $LOADED_FEATURES.grep(/mistri_locks\.so\z/).join(" "), " ", MistriLocks::VERSION, " ", Gem.loaded_specs["mistri_locks"].platform')"
[ "$loaded" = "$gem_dir/lib/mistri_locks/$minor/mistri_locks.so $version x86_64-linux" ] ||
  die "loaded: $loaded (wanted the gem's lib/mistri_locks/$minor/mistri_locks.so, $version, x86_64-linux)"
ok "require loads ${loaded%% *}; MistriLocks::VERSION $version"
for url in "$redis_url" "$local_path"; do
  out="$(cd "$work" && rb "$here/quickstart.rb" "$url")" || die "Ruby quick start on $url: $out"
  grep -q '^HELD [0-9]' <<<"$out" && grep -q '^STOPPED stop flag' <<<"$out" || die "Ruby quick start on $url said: $out"
  ok "Ruby quick start on ${url/$work/\$work}: $(tr '\n' ' ' <<<"$out")"
done

say "Ruby: the gem's RBS signatures (sig/)"
[ -f "$gem_dir/sig/mistri_locks.rbs" ] || die "the gem lacks sig/mistri_locks.rbs"
rbs_bin="$(ruby -e 'print Gem.bin_path("rbs", "rbs")' 2>/dev/null)" || die "no rbs (Ruby 3.1 bundles it)"
(cd "$work" && ruby "$rbs_bin" --version && ruby "$rbs_bin" -I "$gem_dir/sig" validate --silent) >"$work/rbs.log" 2>&1 ||
  { cat "$work/rbs.log"; die "rbs validate"; }
ok "rbs validate ($(head -1 "$work/rbs.log")): the signatures parse and every type they name resolves"
(cd "$work" && GEM_HOME="$gem_home" GEM_PATH="$gem_home:$(ruby -e 'print Gem.path.join(":")')" \
  ruby "$here/rbs_coverage.rb" "$gem_dir/sig") || die "the signatures do not cover the public surface"
ok "every public method of MistriLocks has a signature, and every signature a method"

# ---------------------------------------------------------------- C and the CLI
say "C and the CLI: $(basename "$tarball") unpacked elsewhere"
mkdir -p "$work/c"
nocc tar -xzf "$tarball" -C "$work/c"
prefix="$work/c/mistri_locks-$version-x86_64-linux-gnu"
[ -L "$prefix/lib/libmistri_locks.so" ] && [ -e "$prefix/lib/libmistri_locks.so.0" ] || die "the tarball lacks the .so links"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion mistri_locks)" = "$version" ] || die "pkg-config --modversion: $(pkg-config --modversion mistri_locks)"
[ "$(pkg-config --variable=libdir mistri_locks)" -ef "$prefix/lib" ] || die "the .pc does not point at the unpacked lib/"
# The user's own program needs a compiler: gcc by absolute path.
cc_bin="$(command -v gcc)"
# shellcheck disable=SC2046
"$cc_bin" -std=c11 -Wall -Wextra -Werror "$here/quickstart.c" -o "$work/quickstart" \
  $(pkg-config --cflags --libs mistri_locks) -Wl,-rpath,"$(pkg-config --variable=libdir mistri_locks)"
unset PKG_CONFIG_PATH
lib_used="$(nocc env LD_TRACE_LOADED_OBJECTS=1 "$work/quickstart" | sed -n 's/.*libmistri_locks.so.0 => \([^ ]*\).*/\1/p')"
[ "$lib_used" -ef "$prefix/lib/libmistri_locks.so.0" ] || die "the quick start loads $lib_used, not the tarball's"
ok "quick start compiled with pkg-config against the tarball; loads ${lib_used/$work/\$work}"
cli="$prefix/bin/mistri-locks"
[ "$(nocc "$cli" --version)" = "mistri-locks $version" ] || die "mistri-locks --version: $(nocc "$cli" --version)"
ok "mistri-locks --version: $(nocc "$cli" --version)"
for url in "$redis_url" "$local_path"; do
  nocc "$work/quickstart" "$url" >"$work/c.out" 2>&1 &
  qs=$!
  for _ in $(seq 200); do grep -q '^HELD' "$work/c.out" && break; sleep 0.05; done
  grep -q '^HELD' "$work/c.out" || { kill "$qs"; cat "$work/c.out"; die "the C quick start did not hold on $url"; }
  nocc "$cli" --url "$url" status report --json >"$work/status.json" || die "mistri-locks status report on $url"
  grep -q '"holder"' "$work/status.json" || die "mistri-locks status does not show the C hold: $(cat "$work/status.json")"
  nocc "$cli" --url "$url" stop stop:report >/dev/null || die "mistri-locks stop on $url"
  wait "$qs" || { cat "$work/c.out"; die "the C quick start on $url did not stop"; }
  grep -q "^VERSION $version $version\$" "$work/c.out" && grep -q '^STOPPED$' "$work/c.out" ||
    die "the C quick start on $url said: $(cat "$work/c.out")"
  nocc "$cli" --url "$url" clear stop:report >/dev/null
  ok "C quick start on ${url/$work/\$work}: held (mistri-locks status saw it), stopped by mistri-locks stop; mistri_version() = MISTRI_LOCKS_VERSION = $version"
done

# ---------------------------------------------------------------- Node
say "Node: npm install --offline $(basename "$npm_tgz") $(basename "$npm_platform_tgz") (fresh project, no compiler, no registry)"
# Both tarballs in one command: the platform package satisfies mistri-locks'
# optional dependency, so npm needs nothing from a registry, and the
# registry given (a closed port) could not answer if it asked. A failed
# optional dependency is only a warning to npm: the checks below are what
# prove the platform package is the one installed and loaded.
npm_offline=(--offline --registry http://127.0.0.1:9 --no-audit --no-fund)
app="$work/node-app"
mkdir -p "$app"
printf '{"name": "app", "private": true, "type": "module"}\n' >"$app/package.json"
started=$(date +%s.%N)
(cd "$app" && nocc npm install "${npm_offline[@]}" "$npm_tgz" "$npm_platform_tgz") >"$work/npm.log" 2>&1 ||
  { cat "$work/npm.log"; die "npm install of the npm tarballs failed"; }
ok "installed in $(python3 -c "print(f'{$(date +%s.%N) - $started:.1f}')") s"
! grep -Eiq 'ENOTCACHED|ECONNREFUSED|127\.0\.0\.1:9|optional' "$work/npm.log" ||
  { cat "$work/npm.log"; die "npm tried the registry or skipped an optional dependency"; }
(cd "$app" && nocc npm ls "${npm_offline[@]}" --all) >"$work/npm-ls.txt" 2>&1 ||
  { cat "$work/npm-ls.txt"; die "npm ls reports a problem in the installed tree"; }
# npm skips an optional dependency it cannot get without a word, and npm ls
# then says UNMET OPTIONAL DEPENDENCY (exit 0): mistri-locks' edge must be
# met by the installed platform package (deduped).
! grep -q UNMET "$work/npm-ls.txt" && grep -q "@mistri-locks/linux-x64-gnu@$version deduped" "$work/npm-ls.txt" ||
  die "mistri-locks' optional dependency is not the installed @mistri-locks/linux-x64-gnu@$version: $(cat "$work/npm-ls.txt")"
[ "$(node -p 'JSON.stringify(require(process.argv[1]).optionalDependencies)' \
      "$app/node_modules/mistri-locks/package.json")" = "{\"@mistri-locks/linux-x64-gnu\":\"$version\"}" ] ||
  die "mistri-locks does not name @mistri-locks/linux-x64-gnu $version as its optional dependency"
[ -z "$(find "$app/node_modules/mistri-locks" -name '*.node')" ] || die "the mistri-locks package carries an addon"
[ -f "$app/node_modules/mistri-locks/lib/index.d.ts" ] || die "the mistri-locks package lacks its TypeScript declarations"
ok "npm ls: mistri-locks@$version with @mistri-locks/linux-x64-gnu@$version (its optional dependency), nothing fetched; lib/index.d.ts ships, no addon in mistri-locks itself"
addon="$app/node_modules/@mistri-locks/linux-x64-gnu/mistri_locks.linux-x64-gnu.node"
want="$(tar -xzOf "$npm_platform_tgz" package/mistri_locks.linux-x64-gnu.node | sha256sum | cut -d' ' -f1)"
[ "$(sha256sum "$addon" | cut -d' ' -f1)" = "$want" ] || die "the installed addon is not the platform tarball's"
loaded="$(cd "$app" && nocc node --input-type=module -e '
  import { createRequire } from "node:module";
  import { createHash } from "node:crypto";
  import { readFileSync } from "node:fs";
  const ml = await import("mistri-locks");
  const cjs = createRequire(process.cwd() + "/x.js")("mistri-locks");
  if (cjs.open !== ml.open) throw new Error("import and require differ");
  const addons = Object.keys(createRequire(process.cwd() + "/x.js").cache).filter((f) => f.endsWith(".node"));
  if (addons.length !== 1) throw new Error(`loaded addons: ${addons}`);
  console.log(addons[0], createHash("sha256").update(readFileSync(addons[0])).digest("hex"), ml.version);')" ||
  die "the installed package does not load"
[ "$loaded" = "$addon $want $version" ] || die "loaded: $loaded (wanted $addon $want $version)"
ok "import and require load ${addon/$work/\$work} (sha256 ${want:0:12}…, the platform tarball's); version $version"
[ -z "$(find "$app" -name '*.rlib' -o -name 'target' -type d)" ] || die "a build happened under $app"
cp "$here/quickstart.mjs" "$app/"  # ESM resolves 'mistri-locks' from the importing file's folder
for url in "$redis_url" "$local_path"; do
  out="$(cd "$app" && nocc node quickstart.mjs "$url")" || die "Node quick start on $url: $out"
  grep -q '^HELD [0-9]' <<<"$out" && grep -q '^STOPPED stop flag' <<<"$out" || die "Node quick start on $url said: $out"
  ok "Node quick start on ${url/$work/\$work}: $(tr '\n' ' ' <<<"$out")"
done

say "Node: mistri-locks without its platform package (npm install --omit=optional)"
bare="$work/node-bare"
mkdir -p "$bare"
printf '{"name": "bare", "private": true, "type": "module"}\n' >"$bare/package.json"
(cd "$bare" && nocc npm install "${npm_offline[@]}" --omit=optional "$npm_tgz") >"$work/npm-bare.log" 2>&1 ||
  { cat "$work/npm-bare.log"; die "npm install --omit=optional of $(basename "$npm_tgz") failed"; }
[ ! -e "$bare/node_modules/@mistri-locks" ] || die "--omit=optional installed the platform package"
err="$(cd "$bare" && nocc node -e '
  try { require("mistri-locks"); console.log("LOADED"); }
  catch (e) { console.log(e.code, e.message); }')" || die "node exited with an error: $err"
for part in MISTRI_NO_ADDON "mistri_locks.linux-x64-gnu.node" "@mistri-locks/linux-x64-gnu" "npm run build"; do
  grep -qF -- "$part" <<<"$err" || die "without the platform package, import said: $err (no '$part')"
done
ok "require fails with MISTRI_NO_ADDON naming the package folder's file, @mistri-locks/linux-x64-gnu and npm run build"

# ---------------------------------------------------------------- from source (figures)
if [ "${PACKAGING_FROM_SOURCE:-0}" = 1 ]; then
  say "from source, for comparison (compiles with cargo; its own cold target dirs)"
  python3 -m venv "$work/src-py"
  started=$(date +%s.%N)
  (cd "$work" && CARGO_TARGET_DIR="$work/src-py-target" "$work/src-py/bin/python" -m pip install -q --no-cache-dir "$sdist") \
    >"$work/src-py.log" 2>&1 || { cat "$work/src-py.log"; die "pip install of the sdist"; }
  echo "   pip install $(basename "$sdist"): $(python3 -c "print(f'{$(date +%s.%N) - $started:.0f}')") s (wheel: $py_install s)"
  started=$(date +%s.%N)
  GEM_HOME="$work/src-gems" gem install --local --no-document "$source_gem" >"$work/src-gem.log" 2>&1 ||
    { cat "$work/src-gem.log"; die "gem install of the source gem"; }
  echo "   gem install $(basename "$source_gem"): $(python3 -c "print(f'{$(date +%s.%N) - $started:.0f}')") s (platform gem: $gem_install s)"
  (cd "$work" && GEM_HOME="$work/src-gems" GEM_PATH="$work/src-gems" ruby -e '
    require "mistri_locks"
    so = $LOADED_FEATURES.grep(/mistri_locks\.so\z/)
    raise "loaded #{so.inspect}" unless so.size == 1 && so[0].start_with?(ENV["GEM_HOME"]) && !so[0].include?("/3.1/")
    raise "acquire" unless MistriLocks::Memory.new.acquire("k", ttl: 5)') || die "the source gem does not load its own build"
  (cd "$work" && "$work/src-py/bin/python" -c 'import mistri_locks; assert mistri_locks.Memory().acquire("k", 5)') ||
    die "the sdist install does not import"
  ok "from source: the sdist and the source gem install (compiling) and load their own builds"
fi

echo
echo "packaging: $passed passed, 0 failed"
