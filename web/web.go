// Package web holds the inspector's page: plain HTML, CSS and JavaScript,
// embedded in the binary, with no build step.
//
// The script is native ES modules under js/: index.html loads js/main.js
// with <script type="module">, and each module imports the others by
// relative path, so every file under js/ is served as it is written.
package web

import (
	"embed"
	"io/fs"
)

//go:embed index.html style.css favicon.svg js
var files embed.FS

// FS returns the page's files: index.html, style.css, favicon.svg, and the
// script's modules under js/ (js/main.js is the entry point).
func FS() fs.FS { return files }
