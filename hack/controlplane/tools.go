//go:build tools

// Package tools pins the Kubernetes control-plane binaries this project builds
// for its local, real API server (tests and demo). Nothing here is run; the
// imports only make `go build` resolve these main packages at the pinned versions.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
