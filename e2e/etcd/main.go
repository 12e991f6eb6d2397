// The etcd server binary, built from the go.etcd.io/etcd/server/v3 module (the repository's root
// module, whose main.go is the same two lines, has replace directives and cannot be built from the
// module proxy).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
