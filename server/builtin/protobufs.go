package builtin

import (
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/gobrpc/gobrpc/controller"
)

// /protobufs, as brpc's protobufs_service.cpp: the list of the served
// services and of every message (and enum) their methods reach, by full
// name; /protobufs/NAME prints that definition in .proto syntax, rebuilt
// from the descriptors:
//
//	service EchoService {
//	  rpc Echo(.example.EchoRequest) returns (.example.EchoResponse);
//	}
//
// Types are written as brpc (protobuf's DebugString) writes them, fully
// qualified with a leading dot.

func (p *Pages) serveProtobufs(w http.ResponseWriter, r *http.Request, name string) {
	defs := collectDescriptors(p.srv.Services())
	if name != "" {
		d, ok := defs[name]
		if !ok {
			fail(w, controller.ENOMETHOD, "Fail to find any protobuf message by `%s'", name)
			return
		}
		reply(w, r, contentText, protoText(d), false)
		return
	}
	names := make([]string, 0, len(defs))
	for n := range defs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	if !useHTML(r) {
		for _, n := range names {
			b.WriteString(n + "\n")
		}
		reply(w, r, contentText, b.String(), false)
		return
	}
	writeHead(&b, "protobufs", "protobufs")
	b.WriteString("<ul>\n")
	for _, n := range names {
		b.WriteString(`<li><a href="/protobufs/` + esc(n) + `">` + esc(n) + "</a> <a href=\"#" + esc(n) + "\">↓</a></li>\n")
	}
	b.WriteString("</ul>\n")
	for _, n := range names {
		b.WriteString(`<h4 id="` + esc(n) + `">` + esc(n) + "</h4>\n<pre>" + esc(protoText(defs[n])) + "</pre>\n")
	}
	writeTail(&b)
	reply(w, r, contentHTML, b.String(), false)
}

// collectDescriptors gathers the services and, transitively, every message
// and enum their methods' types reach, by full name. Map entries are not
// listed (they print as map<K, V>).
func collectDescriptors(services []ServiceStatus) map[string]protoreflect.Descriptor {
	defs := map[string]protoreflect.Descriptor{}
	var stack []protoreflect.MessageDescriptor
	for _, s := range services {
		sd := s.Descriptor
		if sd == nil {
			continue
		}
		defs[string(sd.FullName())] = sd
		for i := 0; i < sd.Methods().Len(); i++ {
			md := sd.Methods().Get(i)
			stack = append(stack, md.Input(), md.Output())
		}
	}
	for len(stack) > 0 {
		md := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if md == nil {
			continue
		}
		if !md.IsMapEntry() {
			if _, seen := defs[string(md.FullName())]; seen {
				continue
			}
			defs[string(md.FullName())] = md
		}
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if sub := fd.Message(); sub != nil && sub != md {
				stack = append(stack, sub)
			}
			if ed := fd.Enum(); ed != nil {
				defs[string(ed.FullName())] = ed
			}
		}
	}
	return defs
}

// protoText prints one definition, preceded by a comment naming its file.
func protoText(d protoreflect.Descriptor) string {
	var b strings.Builder
	if f := d.ParentFile(); f != nil {
		b.WriteString("// " + f.Path() + " (" + syntaxName(f) + ", package " + string(f.Package()) + ")\n")
	}
	switch x := d.(type) {
	case protoreflect.ServiceDescriptor:
		writeService(&b, x)
	case protoreflect.MessageDescriptor:
		writeMessage(&b, x, "")
	case protoreflect.EnumDescriptor:
		writeEnum(&b, x, "")
	}
	return b.String()
}

func syntaxName(f protoreflect.FileDescriptor) string {
	switch f.Syntax() {
	case protoreflect.Proto2:
		return "proto2"
	case protoreflect.Proto3:
		return "proto3"
	}
	return "editions"
}

// maxFieldNumber is the largest field number (protowire.MaxValidNumber).
const maxFieldNumber = 1<<29 - 1

func typeRef(name protoreflect.FullName) string { return "." + string(name) }

func writeService(b *strings.Builder, sd protoreflect.ServiceDescriptor) {
	b.WriteString("service " + string(sd.Name()) + " {\n")
	for i := 0; i < sd.Methods().Len(); i++ {
		md := sd.Methods().Get(i)
		in, out := typeRef(md.Input().FullName()), typeRef(md.Output().FullName())
		if md.IsStreamingClient() {
			in = "stream " + in
		}
		if md.IsStreamingServer() {
			out = "stream " + out
		}
		b.WriteString("  rpc " + string(md.Name()) + "(" + in + ") returns (" + out + ")")
		if o, ok := md.Options().(*descriptorpb.MethodOptions); ok && o.GetDeprecated() {
			b.WriteString(" {\n    option deprecated = true;\n  }\n")
		} else {
			b.WriteString(";\n")
		}
	}
	b.WriteString("}\n")
}

// writeMessage prints a message as protobuf's DebugString orders it:
// nested messages, nested enums, fields (a oneof where its first field
// is), extension ranges, nested extensions, reserved ranges and names.
func writeMessage(b *strings.Builder, md protoreflect.MessageDescriptor, indent string) {
	b.WriteString(indent + "message " + string(md.Name()) + " {\n")
	writeMessageBody(b, md, indent+"  ")
	b.WriteString(indent + "}\n")
}

func writeMessageBody(b *strings.Builder, md protoreflect.MessageDescriptor, in string) {
	if o, ok := md.Options().(*descriptorpb.MessageOptions); ok && o.GetDeprecated() {
		b.WriteString(in + "option deprecated = true;\n")
	}
	groups := map[protoreflect.FullName]bool{} // nested messages printed as groups
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		if fd := fields.Get(i); isGroup(fd) {
			groups[fd.Message().FullName()] = true
		}
	}
	for i := 0; i < md.Messages().Len(); i++ {
		sub := md.Messages().Get(i)
		if !sub.IsMapEntry() && !groups[sub.FullName()] {
			writeMessage(b, sub, in)
		}
	}
	for i := 0; i < md.Enums().Len(); i++ {
		writeEnum(b, md.Enums().Get(i), in)
	}
	printedOneof := map[protoreflect.FullName]bool{}
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		od := fd.ContainingOneof()
		if od == nil || od.IsSynthetic() {
			writeField(b, fd, in)
			continue
		}
		if printedOneof[od.FullName()] {
			continue
		}
		printedOneof[od.FullName()] = true
		b.WriteString(in + "oneof " + string(od.Name()) + " {\n")
		for j := 0; j < od.Fields().Len(); j++ {
			writeField(b, od.Fields().Get(j), in+"  ")
		}
		b.WriteString(in + "}\n")
	}
	for i := 0; i < md.ExtensionRanges().Len(); i++ {
		r := md.ExtensionRanges().Get(i)
		b.WriteString(in + "extensions " + rangeText(int64(r[0]), int64(r[1])-1, maxFieldNumber) + ";\n")
	}
	writeExtensions(b, md.Extensions(), in)
	if rr := md.ReservedRanges(); rr.Len() > 0 {
		parts := make([]string, rr.Len())
		for i := range parts {
			r := rr.Get(i)
			parts[i] = rangeText(int64(r[0]), int64(r[1])-1, maxFieldNumber)
		}
		b.WriteString(in + "reserved " + strings.Join(parts, ", ") + ";\n")
	}
	writeReservedNames(b, md.ReservedNames(), in)
}

// writeExtensions prints extension fields grouped by the message they
// extend.
func writeExtensions(b *strings.Builder, exts protoreflect.ExtensionDescriptors, in string) {
	var last protoreflect.FullName
	for i := 0; i < exts.Len(); i++ {
		xd := exts.Get(i)
		target := xd.ContainingMessage().FullName()
		if i == 0 || target != last {
			if i > 0 {
				b.WriteString(in + "}\n")
			}
			b.WriteString(in + "extend " + typeRef(target) + " {\n")
			last = target
		}
		writeField(b, xd, in+"  ")
	}
	if exts.Len() > 0 {
		b.WriteString(in + "}\n")
	}
}

func writeReservedNames(b *strings.Builder, names protoreflect.Names, in string) {
	if names.Len() == 0 {
		return
	}
	parts := make([]string, names.Len())
	for i := range parts {
		parts[i] = strconv.Quote(string(names.Get(i)))
	}
	b.WriteString(in + "reserved " + strings.Join(parts, ", ") + ";\n")
}

// rangeText prints an inclusive range: "5", "5 to 9" or "100 to max".
func rangeText(lo, hi, max int64) string {
	switch {
	case lo == hi:
		return strconv.FormatInt(lo, 10)
	case hi >= max:
		return strconv.FormatInt(lo, 10) + " to max"
	}
	return strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10)
}

// isGroup reports whether a field is a proto2 group (printed inline).
func isGroup(fd protoreflect.FieldDescriptor) bool {
	if fd.Kind() != protoreflect.GroupKind || fd.ParentFile() == nil || fd.ParentFile().Syntax() != protoreflect.Proto2 {
		return false
	}
	m := fd.Message()
	return m != nil && m.Parent() == fd.Parent() && strings.ToLower(string(m.Name())) == string(fd.Name())
}

// label is the field's label as written in its file.
func label(fd protoreflect.FieldDescriptor) string {
	switch {
	case fd.IsMap():
		return ""
	case fd.Cardinality() == protoreflect.Repeated:
		return "repeated "
	case fd.Cardinality() == protoreflect.Required:
		return "required "
	case fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic():
		return ""
	case fd.HasOptionalKeyword(), fd.IsExtension() && fd.ParentFile() != nil && fd.ParentFile().Syntax() == protoreflect.Proto2:
		return "optional "
	}
	return ""
}

func fieldType(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if fd.IsMap() {
			return "map<" + fieldType(fd.MapKey()) + ", " + fieldType(fd.MapValue()) + ">"
		}
		return typeRef(fd.Message().FullName())
	case protoreflect.EnumKind:
		return typeRef(fd.Enum().FullName())
	}
	return fd.Kind().String() // "int32", "string", "sfixed64" ...
}

func writeField(b *strings.Builder, fd protoreflect.FieldDescriptor, in string) {
	num := strconv.Itoa(int(fd.Number()))
	if isGroup(fd) {
		b.WriteString(in + label(fd) + "group " + string(fd.Message().Name()) + " = " + num + " {\n")
		writeMessageBody(b, fd.Message(), in+"  ")
		b.WriteString(in + "}\n")
		return
	}
	b.WriteString(in + label(fd) + fieldType(fd) + " " + string(fd.Name()) + " = " + num)
	var opts []string
	if fd.HasDefault() {
		opts = append(opts, "default = "+defaultText(fd))
	}
	if fd.HasJSONName() && fd.JSONName() != jsonCamel(string(fd.Name())) {
		opts = append(opts, "json_name = "+strconv.Quote(fd.JSONName()))
	}
	if o, ok := fd.Options().(*descriptorpb.FieldOptions); ok && o != nil {
		if o.Packed != nil {
			opts = append(opts, "packed = "+strconv.FormatBool(o.GetPacked()))
		}
		if o.GetLazy() {
			opts = append(opts, "lazy = true")
		}
		if o.GetDeprecated() {
			opts = append(opts, "deprecated = true")
		}
	}
	if len(opts) > 0 {
		b.WriteString(" [" + strings.Join(opts, ", ") + "]")
	}
	b.WriteString(";\n")
}

// jsonCamel is protoc's default json_name: lowerCamelCase of the name.
func jsonCamel(s string) string {
	var b strings.Builder
	up := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_':
			up = true
		case up && c >= 'a' && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
			up = false
		default:
			b.WriteByte(c)
			up = false
		}
	}
	return b.String()
}

// defaultText prints a proto2 default as .proto syntax writes it.
func defaultText(fd protoreflect.FieldDescriptor) string {
	v := fd.Default()
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if ev := fd.DefaultEnumValue(); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.StringKind:
		return `"` + cEscape([]byte(v.String())) + `"`
	case protoreflect.BytesKind:
		return `"` + cEscape(v.Bytes()) + `"`
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		f := v.Float()
		switch {
		case math.IsInf(f, 1):
			return "inf"
		case math.IsInf(f, -1):
			return "-inf"
		case math.IsNaN(f):
			return "nan"
		}
		bits := 64
		if fd.Kind() == protoreflect.FloatKind {
			bits = 32
		}
		return strconv.FormatFloat(f, 'g', -1, bits)
	}
	return v.String() // ints and bools
}

// cEscape escapes as protobuf's CEscape: \n \r \t \" \' \\ and octal for
// other non-printable bytes.
func cEscape(s []byte) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '"':
			b.WriteString(`\"`)
		case '\'':
			b.WriteString(`\'`)
		case '\\':
			b.WriteString(`\\`)
		default:
			if c < 0x20 || c >= 0x7f {
				b.WriteByte('\\')
				b.WriteByte('0' + c>>6)
				b.WriteByte('0' + c>>3&7)
				b.WriteByte('0' + c&7)
			} else {
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

func writeEnum(b *strings.Builder, ed protoreflect.EnumDescriptor, in string) {
	b.WriteString(in + "enum " + string(ed.Name()) + " {\n")
	if o, ok := ed.Options().(*descriptorpb.EnumOptions); ok && o.GetAllowAlias() {
		b.WriteString(in + "  option allow_alias = true;\n")
	}
	for i := 0; i < ed.Values().Len(); i++ {
		v := ed.Values().Get(i)
		b.WriteString(in + "  " + string(v.Name()) + " = " + strconv.Itoa(int(v.Number())) + ";\n")
	}
	if rr := ed.ReservedRanges(); rr.Len() > 0 {
		parts := make([]string, rr.Len())
		for i := range parts {
			r := rr.Get(i)
			parts[i] = rangeText(int64(r[0]), int64(r[1]), math.MaxInt32)
		}
		b.WriteString(in + "  reserved " + strings.Join(parts, ", ") + ";\n")
	}
	writeReservedNames(b, ed.ReservedNames(), in+"  ")
	b.WriteString(in + "}\n")
}
