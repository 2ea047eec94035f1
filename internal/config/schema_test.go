package config

import (
	"reflect"
)

func reflectTypeOfConfig() reflect.Type { return reflect.TypeFor[Config]() }

// schemaKeys lists the leaf key paths of struct type t ("listeners.tls.cert").
func schemaKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		k := joinKey(prefix, tagName(f))
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != durationType {
			out = append(out, schemaKeys(ft, k)...)
			continue
		}
		out = append(out, k)
	}
	return out
}
