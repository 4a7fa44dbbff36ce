package agent

// A file of routes, for those who have many (listen --routes FILE), in
// one of two forms.
//
// A file whose name ends in .yaml or .yml is YAML: a list of routes, at
// the top or under a "routes" key, each a string MATCH -> TARGET or a
// mapping with match (a string, or a list of conditions, all of which
// must hold) and to (the target):
//
//	routes:
//	  - path:/github/** -> localhost:9001
//	  - match: [json:data.status_v2=succeeded, header:X-Env=staging]
//	    to: localhost:9002
//	  - match: path:/noise/**
//	    to: drop
//
// Any other file has a route a line, MATCH -> TARGET; blank lines and
// lines starting with # are skipped:
//
//	# GitHub to the first receiver, the rest to --forward
//	path:/github/** -> localhost:9001
//	json:data.status_v2=succeeded & header:X-Env=staging -> localhost:9002
//
// Errors name the file and the line.

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// ParseRoutes reads the routes of a routes file named name (its name
// chooses the form) whose content is data.
func ParseRoutes(name string, data []byte) ([]Route, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		return parseRoutesYAML(name, data)
	}
	return parseRoutesLines(name, data)
}

func parseRoutesLines(name string, data []byte) ([]Route, error) {
	var routes []Route
	for i, line := range bytes.Split(data, []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" || s[0] == '#' {
			continue
		}
		r, err := ParseRoute(s)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, i+1, err)
		}
		routes = append(routes, r)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("%s: no route in the file: write one a line, MATCH -> TARGET", name)
	}
	return routes, nil
}

func parseRoutesYAML(name string, data []byte) ([]Route, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: no route in the file: give a list of routes under routes:", name)
	}
	list := doc.Content[0]
	if list.Kind == yaml.MappingNode {
		var found *yaml.Node
		for i := 0; i+1 < len(list.Content); i += 2 {
			if k := list.Content[i]; k.Value != "routes" {
				return nil, fmt.Errorf("%s:%d: unknown key %q: the file holds routes: and nothing else", name, k.Line, k.Value)
			}
			found = list.Content[i+1]
		}
		if found == nil {
			return nil, fmt.Errorf("%s: no routes: key", name)
		}
		list = found
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("%s:%d: routes must be a list, one route an item", name, list.Line)
	}
	var routes []Route
	for _, item := range list.Content {
		text, err := yamlRouteText(item)
		if err == nil {
			var r Route
			if r, err = ParseRoute(text); err == nil {
				routes = append(routes, r)
				continue
			}
		}
		line := item.Line
		var le *lineError
		if errors.As(err, &le) {
			line, err = le.line, le.err
		}
		return nil, fmt.Errorf("%s:%d: %w", name, line, err)
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("%s: the list of routes is empty", name)
	}
	return routes, nil
}

// lineError is an error of a route at a line of its own.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return e.err.Error() }

// yamlRouteText is the route an item of the list writes: the string
// itself, or a mapping's match and to joined as MATCH -> TARGET.
func yamlRouteText(item *yaml.Node) (string, error) {
	switch item.Kind {
	case yaml.ScalarNode:
		return item.Value, nil
	case yaml.MappingNode:
	default:
		return "", errors.New("a route is a string, MATCH -> TARGET, or a mapping with match and to")
	}
	var match, to string
	var hasMatch, hasTo bool
	for i := 0; i+1 < len(item.Content); i += 2 {
		k, v := item.Content[i], item.Content[i+1]
		switch k.Value {
		case "match":
			hasMatch = true
			switch v.Kind {
			case yaml.ScalarNode:
				match = v.Value
			case yaml.SequenceNode:
				var conds []string
				for _, c := range v.Content {
					if c.Kind != yaml.ScalarNode {
						return "", &lineError{c.Line, errors.New("a condition of match is a string, such as path:/github/**")}
					}
					conds = append(conds, c.Value)
				}
				match = strings.Join(conds, " & ")
			default:
				return "", &lineError{v.Line, errors.New("match is a condition, or a list of conditions that must all hold")}
			}
		case "to":
			if v.Kind != yaml.ScalarNode {
				return "", &lineError{v.Line, errors.New("to is a target: host:port, a URL, or drop")}
			}
			to, hasTo = v.Value, true
		default:
			return "", &lineError{k.Line, fmt.Errorf("unknown key %q in a route: a route has match and to", k.Value)}
		}
	}
	switch {
	case !hasMatch:
		return "", errors.New("the route has no match: give one, such as match: path:/github/**")
	case !hasTo:
		return "", errors.New("the route has no to: give its target, host:port, a URL, or drop")
	}
	return match + " -> " + to, nil
}
