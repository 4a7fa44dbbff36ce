// Package web holds the inspector's page: plain HTML, CSS and JavaScript,
// embedded in the binary, with no build step.
package web

import (
	"embed"
	"io/fs"
)

//go:embed index.html app.js style.css favicon.svg
var files embed.FS

// FS returns the page's files: index.html, app.js, style.css, favicon.svg.
func FS() fs.FS { return files }
