//go:build tools

// Package tools pins the commands the notebooks need: GoNB (the Jupyter
// kernel), goimports and gopls, which GoNB runs. They live in a module of
// their own, so that the project's go.mod does not carry their
// dependencies. scripts/setup-notebooks.sh installs them with
//
//	cd tools && go install github.com/janpfeifer/gonb golang.org/x/tools/cmd/goimports golang.org/x/tools/gopls
//
// without a version: `go install mod@vX` can fail on a module proxy's
// deprecation check, so the versions are the ones in tools/go.mod.
package tools

import (
	_ "github.com/janpfeifer/gonb"
	_ "golang.org/x/tools/cmd/goimports"
	_ "golang.org/x/tools/gopls"
)
