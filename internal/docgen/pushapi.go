package docgen

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// PushAPISection is the name of the generated section of docs/push-api.md.
const PushAPISection = "push-api-reference"

// openAPI is the part of an OpenAPI v2 document the reference is made of.
type openAPI struct {
	Paths       map[string]map[string]operation `json:"paths"`
	Definitions map[string]schema               `json:"definitions"`
}

type operation struct {
	Summary     string      `json:"summary"`
	Description string      `json:"description"`
	OperationID string      `json:"operationId"`
	Parameters  []parameter `json:"parameters"`
	Responses   map[string]struct {
		Schema *schema `json:"schema"`
	} `json:"responses"`
}

type parameter struct {
	In     string  `json:"in"`
	Schema *schema `json:"schema"`
}

type schema struct {
	Ref                  string            `json:"$ref"`
	Type                 string            `json:"type"`
	Format               string            `json:"format"`
	Description          string            `json:"description"`
	Title                string            `json:"title"`
	Enum                 []string          `json:"enum"`
	Items                *schema           `json:"items"`
	Properties           orderedProperties `json:"properties"`
	AdditionalProperties json.RawMessage   `json:"additionalProperties"`
}

// orderedProperties keeps an object's properties in the document's order,
// which is the order of the fields in the .proto file.
type orderedProperties struct {
	names []string
	props map[string]schema
}

func (o *orderedProperties) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	o.props = map[string]schema{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		var s schema
		if err := dec.Decode(&s); err != nil {
			return err
		}
		o.names = append(o.names, name)
		o.props[name] = s
	}
	return nil
}

// anyJSON is how a google.protobuf.Any looks in JSON; the generated
// description is the protobuf library's own, written for Go programmers.
const anyJSON = "A message of any type, as JSON: `{\"@type\": \"type.googleapis.com/<full message name>\", <its fields>}`, " +
	"e.g. `{\"@type\": \"type.googleapis.com/google.protobuf.StringValue\", \"value\": \"hi\"}`. " +
	"A well-known type with a special JSON form (`StringValue`, `BytesValue`, `Struct`) puts that form in `value`."

// PushAPI renders the Push API reference from its OpenAPI v2 document
// (pb/pushpb/push.swagger.json): every HTTP endpoint with its gRPC method,
// what it does (the .proto comments), its request and answer fields, and
// the message and enum types they use.
func PushAPI(doc []byte) (string, error) {
	var api openAPI
	if err := json.Unmarshal(doc, &api); err != nil {
		return "", fmt.Errorf("the OpenAPI document: %w", err)
	}
	var b strings.Builder
	paths := make([]string, 0, len(api.Paths))
	for p := range api.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	used := map[string]bool{}
	for _, p := range paths {
		methods := make([]string, 0, len(api.Paths[p]))
		for m := range api.Paths[p] {
			methods = append(methods, m)
		}
		sort.Strings(methods)
		for _, m := range methods {
			op := api.Paths[p][m]
			rpc := op.OperationID
			if _, after, ok := strings.Cut(rpc, "_"); ok {
				rpc = after
			}
			fmt.Fprintf(&b, "### `%s %s`\n\n", strings.ToUpper(m), p)
			fmt.Fprintf(&b, "gRPC `gomsg.push.Push/%s`. %s\n\n", rpc, prose1(joinText(op.Summary, op.Description)))
			for _, prm := range op.Parameters {
				if prm.In == "body" && prm.Schema != nil {
					writeObject(&b, "Request", api, *prm.Schema, used)
				}
			}
			if r, ok := op.Responses["200"]; ok && r.Schema != nil {
				writeObject(&b, "Answer", api, *r.Schema, used)
			}
		}
	}
	// Types referred to, and the types they refer to in turn (used holds
	// true for a type whose fields are not yet looked at), in name order.
	for {
		var next []string
		for name, pending := range used {
			if pending {
				next = append(next, name)
			}
		}
		if len(next) == 0 {
			break
		}
		for _, name := range next {
			used[name] = false
			var discard strings.Builder
			writeFields(&discard, api, api.Definitions[name], used)
		}
	}
	names := make([]string, 0, len(used))
	for name := range used {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		return strings.ToLower(typeName(names[i])) < strings.ToLower(typeName(names[j]))
	})
	b.WriteString("### Types\n\n")
	for _, name := range names {
		s := api.Definitions[name]
		fmt.Fprintf(&b, "#### %s\n\n", typeName(name))
		switch {
		case name == "protobufAny":
			b.WriteString(anyJSON + "\n\n")
		case len(s.Enum) > 0:
			writeEnum(&b, s)
		default:
			if d := prose1(s.Description); d != "" {
				b.WriteString(d + "\n\n")
			}
			writeFields(&b, api, s, used)
		}
	}
	return strings.TrimRight(b.String(), "\n") + "\n", nil
}

// writeObject writes a request or answer: a reference to a message type is
// written as that type's fields, here.
func writeObject(b *strings.Builder, label string, api openAPI, s schema, used map[string]bool) {
	if s.Ref != "" {
		s = api.Definitions[refName(s.Ref)]
	}
	if len(s.Properties.names) == 0 {
		fmt.Fprintf(b, "%s: `{}`\n\n", label)
		return
	}
	fmt.Fprintf(b, "%s:\n\n", label)
	writeFields(b, api, s, used)
}

func writeFields(b *strings.Builder, api openAPI, s schema, used map[string]bool) {
	if len(s.Properties.names) == 0 {
		b.WriteString("No fields.\n\n")
		return
	}
	b.WriteString("| field | type | meaning |\n|---|---|---|\n")
	for _, f := range s.Properties.names {
		p := s.Properties.props[f]
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", f, typeOf(p, used), Cell(prose1(joinText(p.Title, p.Description))))
	}
	b.WriteString("\n")
}

func writeEnum(b *strings.Builder, s schema) {
	intro, values := enumDoc(s.Description)
	if intro != "" {
		b.WriteString(intro + "\n\n")
	}
	b.WriteString("| value | meaning |\n|---|---|\n")
	for _, v := range s.Enum {
		fmt.Fprintf(b, "| `%s` | %s |\n", v, Cell(values[v]))
	}
	b.WriteString("\n")
}

// enumValue matches the " - NAME: text" lines protoc-gen-openapiv2 makes of
// the comments of an enum's values.
var enumValue = regexp.MustCompile(`(?m)^ - ([A-Z0-9_]+): `)

func enumDoc(desc string) (intro string, values map[string]string) {
	values = map[string]string{}
	locs := enumValue.FindAllStringSubmatchIndex(desc, -1)
	if len(locs) == 0 {
		return prose1(desc), values
	}
	intro = prose1(desc[:locs[0][0]])
	for i, l := range locs {
		end := len(desc)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		values[desc[l[2]:l[3]]] = prose1(desc[l[1]:end])
	}
	return intro, values
}

func typeOf(s schema, used map[string]bool) string {
	switch {
	case s.Ref != "":
		name := refName(s.Ref)
		if _, seen := used[name]; !seen {
			used[name] = true
		}
		return fmt.Sprintf("[%s](#%s)", typeName(name), Slug(typeName(name)))
	case s.Type == "array" && s.Items != nil:
		return "list of " + typeOf(*s.Items, used)
	case s.Type == "object" && len(s.AdditionalProperties) > 0:
		var v schema
		if json.Unmarshal(s.AdditionalProperties, &v) == nil && (v.Type != "" || v.Ref != "") {
			return "map of string to " + typeOf(v, used)
		}
		return "object"
	case s.Type == "string" && (s.Format == "int64" || s.Format == "uint64"):
		return s.Format + " (a JSON string)"
	case s.Format != "":
		return s.Format
	case s.Type == "boolean":
		return "bool"
	default:
		return s.Type
	}
}

func refName(ref string) string { return ref[strings.LastIndexByte(ref, '/')+1:] }

// typeName is the reader's name of a definition: pushDeliveryStep is
// DeliveryStep, receiptState is receipt.State, rpcStatus is Status.
func typeName(def string) string {
	switch {
	case strings.HasPrefix(def, "push"):
		return strings.TrimPrefix(def, "push")
	case def == "protobufAny":
		return "Any"
	case def == "rpcStatus":
		return "Status"
	}
	for i, r := range def {
		if r >= 'A' && r <= 'Z' {
			return def[:i] + "." + def[i:]
		}
	}
	return def
}

func joinText(parts ...string) string {
	var keep []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			keep = append(keep, p)
		}
	}
	return strings.Join(keep, "\n\n")
}

// prose1 joins a comment's wrapped lines into one line per paragraph and
// its paragraphs with a space: a table cell holds one line.
func prose1(s string) string {
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(s), "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			paras = append(paras, p)
		}
	}
	return strings.Join(paras, " ")
}
