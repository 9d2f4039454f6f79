#!/usr/bin/env bash
# Builds the lab's server binaries from the Go module proxy, once, into a cache outside the repo.
# Each component lands in $BENCHFARM_CACHE/bin/<name>-<version>/ and is skipped when present.
set -euo pipefail

CACHE="${BENCHFARM_CACHE:-$HOME/.cache/benchfarm}"
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.5.35}"
MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
HELM_VERSION="${HELM_VERSION:-v3.19.5}"
export GOFLAGS="-trimpath -mod=mod"
export CGO_ENABLED=0

phase() { printf '[build] %s\n' "$*" >&2; }

# Prints a dot every 15 s so a long silent `go build` still shows life.
with_progress() {
  local what="$1"; shift
  local start=$SECONDS log="$CACHE/build/$what.log"
  mkdir -p "$CACHE/build"
  phase "$what: building (first time only; log: $log)"
  "$@" >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 15
    kill -0 "$pid" 2>/dev/null && phase "$what: still building ($((SECONDS - start)) s)"
  done
  if ! wait "$pid"; then
    phase "$what: FAILED after $((SECONDS - start)) s; last lines of $log:"
    tail -n 20 "$log" >&2
    exit 1
  fi
  phase "$what: built in $((SECONDS - start)) s"
}

build_etcd() {
  local out="$CACHE/bin/etcd-$ETCD_VERSION"
  [ -x "$out/etcd" ] && return 0
  local mod="$CACHE/build/etcd-mod"
  rm -rf "$mod"; mkdir -p "$mod"
  local v2="v2.305.${ETCD_VERSION##*.}"
  cat >"$mod/go.mod" <<GOMOD
module benchfarm.local/etcdbuild
go 1.24
require go.etcd.io/etcd/server/v3 $ETCD_VERSION
replace (
	go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 => go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v2 => go.etcd.io/etcd/client/v2 $v2
	go.etcd.io/etcd/pkg/v3 => go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/raft/v3 => go.etcd.io/etcd/raft/v3 $ETCD_VERSION
)
GOMOD
  printf 'package tools\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$mod/tools.go"
  mkdir -p "$out.tmp"
  with_progress "etcd-$ETCD_VERSION" bash -c "cd '$mod' && go mod tidy && go build -ldflags='-s -w' -o '$out.tmp/etcd' go.etcd.io/etcd/server/v3"
  mv "$out.tmp" "$out"
}

# go.mod of a temporary module that builds k8s.io/kubernetes commands at $K8S_VERSION: every
# staging module (k8s.io/api, client-go, ...) replaced by its published v0.x.y.
k8s_gomod() {
  local mod="$1" name="$2" staging="v0.${K8S_VERSION#v1.}" gomod
  gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    echo "module $name"
    echo "go 1.24"
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo "replace ("
    grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$gomod" |
      awk -v v="$staging" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >"$mod/go.mod"
}

# The version stamps (otherwise the binaries, and the Node, report v0.0.0-master+$Format:%H$).
k8s_ldflags() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  printf '%s' "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  printf '%s' " -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
}

build_kubernetes() {
  local out="$CACHE/bin/kubernetes-$K8S_VERSION"
  [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] && [ -x "$out/kubectl" ] && return 0
  local mod="$CACHE/build/k8s-mod"
  rm -rf "$mod"; mkdir -p "$mod"
  phase "kubernetes-$K8S_VERSION: resolving staging modules"
  k8s_gomod "$mod" benchfarm.local/k8sbuild
  printf 'package tools\nimport (\n_ "k8s.io/kubernetes/cmd/kube-apiserver"\n_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n_ "k8s.io/kubernetes/cmd/kubectl"\n)\n' >"$mod/tools.go"
  local ld; ld=$(k8s_ldflags)
  mkdir -p "$out.tmp"
  with_progress "kubernetes-$K8S_VERSION" bash -c "cd '$mod' && go mod tidy && go build -ldflags='$ld' -o '$out.tmp/' k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# The node's binaries (kubelet, kube-scheduler, kube-proxy) for `make cluster-up`: built only when
# a cluster is first wanted, into their own cache dir and their own temporary module, so a node
# build never races with the control plane's (same replace-line recipe, same version stamps).
build_kubernetes_node() {
  local out="$CACHE/bin/kubernetes-node-$K8S_VERSION"
  [ -x "$out/kubelet" ] && [ -x "$out/kube-scheduler" ] && [ -x "$out/kube-proxy" ] && return 0
  local mod="$CACHE/build/k8s-node-mod"
  rm -rf "$mod"; mkdir -p "$mod"
  phase "kubernetes-node-$K8S_VERSION: resolving staging modules"
  k8s_gomod "$mod" benchfarm.local/k8snodebuild
  printf 'package tools\nimport (\n_ "k8s.io/kubernetes/cmd/kubelet"\n_ "k8s.io/kubernetes/cmd/kube-scheduler"\n_ "k8s.io/kubernetes/cmd/kube-proxy"\n)\n' >"$mod/tools.go"
  local ld; ld=$(k8s_ldflags)
  mkdir -p "$out.tmp"
  with_progress "kubernetes-node-$K8S_VERSION" bash -c "cd '$mod' && go mod tidy && go build -ldflags='$ld' -o '$out.tmp/' k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

# A Go program installed straight from the module proxy at a pinned version.
go_install() {
  local name="$1" version="$2" package="$3"
  local out="$CACHE/bin/$name-$version"
  [ -x "$out/$name" ] && return 0
  mkdir -p "$out.tmp"
  with_progress "$name-$version" env GOBIN="$out.tmp" go install -ldflags='-s -w' "$package@$version"
  rm -rf "$out"; mv "$out.tmp" "$out"
}

build_minio() { go_install minio "$MINIO_VERSION" github.com/minio/minio; }
build_helm() { go_install helm "$HELM_VERSION" helm.sh/helm/v3/cmd/helm; }

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(etcd kubernetes minio helm)   # kubernetes_node: make cluster-up
for t in "${targets[@]}"; do "build_$t"; done
