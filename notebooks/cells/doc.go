// Package cells is the Go source of the notebooks' code cells. Each region
// between "// nb:cell NAME" (declarations) or "// nb:main NAME" (a program:
// one function whose body becomes a GoNB "%%" cell) and "// nb:end" is
// copied into a notebook by internal/nbgen, word for word. The package
// compiles like any other, and its tests run every program, so a cell that
// breaks fails `go test ./...` as well as the notebook.
package cells
