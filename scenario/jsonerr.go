package scenario

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// fieldError is a decoding error said in the file's terms: the field as
// the file names it and the JSON types, never Go's; the decoder's error
// stays in the chain.
type fieldError struct {
	msg string
	err error
}

func (e *fieldError) Error() string { return e.msg }
func (e *fieldError) Unwrap() error { return e.err }

// inFileTerms says what err, from decoding a scenario's JSON, means to
// the one who wrote the file.
func inFileTerms(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "the value"
		} else {
			field = `"` + field + `"`
		}
		return &fieldError{msg: field + " is " + jsonKind(te.Value) + ", not " + goKind(te.Type), err: err}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return &fieldError{msg: "unknown field " + name + " (a typo, or a field of a newer devhook?)", err: err}
	}
	return err
}

// jsonKind names a JSON value as UnmarshalTypeError.Value gives it
// ("string", "number", "number 1.5", "bool", "array", "object").
func jsonKind(v string) string {
	switch {
	case v == "string":
		return "a string"
	case v == "bool":
		return "true or false"
	case v == "array":
		return "a list"
	case v == "object":
		return "an object"
	case strings.HasPrefix(v, "number"):
		return "a number"
	}
	return v
}

// goKind names what a Go type takes in JSON.
func goKind(t reflect.Type) string {
	if t == nil {
		return "what it should be"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return goKind(t.Elem())
	}
	return "what it should be"
}
