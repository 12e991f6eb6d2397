// Pins the modules e2e/build.sh takes CustomResourceDefinitions from (cert-manager's and the
// Prometheus Operator's, for tests/e2e/test_helm.py): only their checksums in go.sum are used;
// nothing is built from them.
module healer.e2e/crds

go 1.26.5
