#!/usr/bin/env bash
# Set-up for the local Flink cluster (run once per machine; a second run finds the cache and exits):
#   - Flink 1.16.3 as a FLINK_HOME, unpacked from the PyPI sdists apache-flink-libraries (lib/, opt/,
#     plugins/, bin/bash-java-utils.jar) and apache-flink (bin/, conf/); never installed into a venv;
#   - the classpath of Beam's Flink job server (org.apache.beam:beam-runners-flink-1.16:2.56.0 and its
#     dependencies from Maven Central, into ~/.m2), written as one line to a file;
#   - Beam's Python SDK boot program (the entry point of Beam's SDK container images), built from
#     the Go module github.com/apache/beam/sdks/v2 at the version of the venv's apache-beam: the
#     task managers start SDK workers through it (PROCESS environment, infra/flink/sdk-boot.sh).
# Prints the cache dir. Cache: $RAGBEAM_CACHE/flink (default ~/.cache/ragbeam/flink).
# Nothing here runs at job time: the cluster scripts only read what this made.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
FLINK_VERSION=1.16.3
BEAM_RUNNER=beam-runners-flink-1.16-2.56.0
cache="${RAGBEAM_CACHE:-$HOME/.cache/ragbeam}/flink"
py="$root/.venv/bin/python"; [ -x "$py" ] || py="$(command -v python3)"
mkdir -p "$cache"
home="$cache/flink-$FLINK_VERSION"
classpath="$cache/$BEAM_RUNNER.classpath"

if [ ! -f "$home/.complete" ]; then
  tmp="$(mktemp -d "$cache/.flink-XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "flink set-up: downloading the Flink $FLINK_VERSION sdists from PyPI" >&2
  "$py" -m pip download --quiet --no-deps --no-binary :all: -d "$tmp/dl" \
    "apache-flink==$FLINK_VERSION" "apache-flink-libraries==$FLINK_VERSION" >&2
  tar -xzf "$tmp/dl/apache-flink-libraries-$FLINK_VERSION.tar.gz" -C "$tmp"
  tar -xzf "$tmp/dl/apache-flink-$FLINK_VERSION.tar.gz" -C "$tmp"
  libs="$tmp/apache-flink-libraries-$FLINK_VERSION/deps"
  sdk="$tmp/apache-flink-$FLINK_VERSION/deps"
  stage="$tmp/home"
  mkdir -p "$stage/bin" "$stage/log"
  cp -r "$libs/lib" "$libs/opt" "$libs/plugins" "$stage/"
  cp "$libs/bin/bash-java-utils.jar" "$stage/bin/"
  cp -r "$sdk/bin/." "$stage/bin/"
  cp -r "$sdk/conf" "$stage/"
  chmod +x "$stage"/bin/*.sh "$stage/bin/flink"
  test -n "$(ls "$stage"/lib/flink-dist*.jar)"  # the runtime itself, or the unpack went wrong
  touch "$stage/.complete"
  rm -rf "$home"; mv "$stage" "$home"
  rm -rf "$tmp"; trap - EXIT
fi

if [ ! -s "$classpath" ]; then
  echo "flink set-up: resolving $BEAM_RUNNER and its dependencies from Maven Central" >&2
  mvn -B -q -f "$here/pom.xml" dependency:build-classpath -Dmdep.outputFile="$classpath.tmp" >&2
  # every entry must exist, or the job server would fail later with a less clear error
  tr ':' '\n' < "$classpath.tmp" | while read -r jar; do test -f "$jar" || { echo "missing $jar" >&2; exit 1; }; done
  mv "$classpath.tmp" "$classpath"
fi
beam_version="$("$py" -c 'import importlib.metadata as m; print(m.version("apache-beam"))')"
boot="$cache/beam-boot-$beam_version/boot"
if [ ! -x "$boot" ]; then
  echo "flink set-up: building Beam's Python SDK boot program $beam_version (Go module)" >&2
  gobin="$(mktemp -d "$cache/.boot-XXXXXX")"
  GOBIN="$gobin" GOFLAGS=-mod=mod go install "github.com/apache/beam/sdks/v2/python/container@v$beam_version" >&2
  mkdir -p "$(dirname "$boot")"
  mv "$gobin/container" "$boot.tmp" && mv "$boot.tmp" "$boot"
  rm -rf "$gobin"
fi
echo "$cache"
