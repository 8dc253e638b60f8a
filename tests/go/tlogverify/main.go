// Command tlogverify checks rensei-routing's audit evidence with Go's own
// golang.org/x/mod/sumdb/note (signed notes) and golang.org/x/mod/sumdb/tlog
// (RFC 6962 record and tree proofs): a verifier that shares no code with the
// Python that wrote the files.
//
// Usage:
//
//	tlogverify note VKEYFILE NOTEFILE
//	    open a checkpoint note with the log's verifier key; print origin, size, root
//	tlogverify proof VKEYFILE PROOFFILE [-witness VKEYFILE]... [-leaf HEX]
//	    check a c2sp.org/tlog-proof@v1 file: the checkpoint's signature, each named
//	    witness's cosignature/v1, and the inclusion of the leaf (by default the record
//	    in the extra line: its payload hash and record hash are recomputed first)
//	tlogverify consistency VKEYFILE OLDNOTE BODYFILE
//	    check a tlog-witness add-checkpoint body against the older checkpoint note
//	tlogverify stored LEAVESFILE
//	    print tlog's stored hashes (hex, in stored-hash-index order) for the leaves
//	    (one hex record hash per line), then "root <base64>" of the whole tree
//
// Exit status: 0 the evidence holds, 1 it does not, 2 usage or unreadable input.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type refused struct{ msg string }

func (r refused) Error() string { return r.msg }

func fail(format string, args ...interface{}) error {
	return refused{fmt.Sprintf(format, args...)}
}

func main() {
	err := run(os.Args[1:])
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "tlogverify:", err)
	if _, ok := err.(refused); ok {
		os.Exit(1)
	}
	os.Exit(2)
}

func run(args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: tlogverify note|proof|consistency|stored ...")
	}
	switch args[0] {
	case "note":
		if len(args) != 3 {
			return fmt.Errorf("usage: tlogverify note VKEYFILE NOTEFILE")
		}
		cp, err := openCheckpoint(args[1], nil, readFile(args[2]))
		if err != nil {
			return err
		}
		fmt.Printf("origin %s\nsize %d\nroot %s\n", cp.origin, cp.size, cp.root)
		return nil
	case "proof":
		return proofCmd(args[1:])
	case "consistency":
		if len(args) != 4 {
			return fmt.Errorf("usage: tlogverify consistency VKEYFILE OLDNOTE BODYFILE")
		}
		return consistencyCmd(args[1], args[2], args[3])
	case "stored":
		if len(args) != 2 {
			return fmt.Errorf("usage: tlogverify stored LEAVESFILE")
		}
		return storedCmd(args[1])
	}
	return fmt.Errorf("unknown command %q", args[0])
}

func readFile(path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlogverify:", err)
		os.Exit(2)
	}
	return data
}

type checkpoint struct {
	origin string
	size   int64
	root   tlog.Hash
	n      *note.Note
}

// openCheckpoint verifies the note's signature by the log key (and every named
// witness's cosignature) with note.Open, then reads origin, size and root hash.
func openCheckpoint(vkeyFile string, witnesses []string, msg []byte) (*checkpoint, error) {
	v, err := note.NewVerifier(strings.TrimSpace(string(readFile(vkeyFile))))
	if err != nil {
		return nil, fmt.Errorf("log key: %v", err)
	}
	list := []note.Verifier{v}
	for _, w := range witnesses {
		cv, err := newCosignatureVerifier(strings.TrimSpace(string(readFile(w))))
		if err != nil {
			return nil, fmt.Errorf("witness key %s: %v", w, err)
		}
		list = append(list, cv)
	}
	n, err := note.Open(msg, note.VerifierList(list...))
	if err != nil {
		return nil, fail("checkpoint note: %v", err)
	}
	verified := map[string]bool{}
	for _, s := range n.Sigs {
		verified[s.Name] = true
	}
	if !verified[v.Name()] {
		return nil, fail("checkpoint note: no signature by the log key")
	}
	for _, cv := range list[1:] {
		if !verified[cv.Name()] {
			return nil, fail("checkpoint note: no cosignature by witness %s", cv.Name())
		}
	}
	lines := strings.Split(strings.TrimSuffix(n.Text, "\n"), "\n")
	if len(lines) < 3 {
		return nil, fail("checkpoint body has fewer than three lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return nil, fail("checkpoint size %q", lines[1])
	}
	root, err := tlog.ParseHash(lines[2])
	if err != nil {
		return nil, fail("checkpoint root hash: %v", err)
	}
	if lines[0] != v.Name() {
		return nil, fail("checkpoint of origin %q, the key names %q", lines[0], v.Name())
	}
	return &checkpoint{origin: lines[0], size: size, root: root, n: n}, nil
}

// cosignatureVerifier checks C2SP tlog-cosignature cosignature/v1 lines (key ID
// with type byte 0x04; signature = 8-byte big-endian time || Ed25519 signature
// over "cosignature/v1\ntime T\n" || note text).
type cosignatureVerifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

func newCosignatureVerifier(vkey string) (note.Verifier, error) {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, fmt.Errorf("malformed verifier key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 33 || (raw[0] != 0x01 && raw[0] != 0x04) {
		return nil, fmt.Errorf("malformed verifier key")
	}
	key := raw[1:]
	sum := sha256.Sum256(append([]byte(parts[0]+"\n\x04"), key...))
	return &cosignatureVerifier{parts[0], binary.BigEndian.Uint32(sum[:4]), ed25519.PublicKey(key)}, nil
}

func (c *cosignatureVerifier) Name() string    { return c.name }
func (c *cosignatureVerifier) KeyHash() uint32 { return c.hash }
func (c *cosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig[:8])
	if t > 1<<63-1 {
		return false
	}
	signed := append([]byte(fmt.Sprintf("cosignature/v1\ntime %d\n", t)), msg...)
	return ed25519.Verify(c.key, signed, sig[8:])
}

// splitHead returns the lines before the first blank line and the note after it.
func splitHead(data []byte) ([]string, []byte, error) {
	i := bytes.Index(data, []byte("\n\n"))
	if i < 0 {
		return nil, nil, fail("no blank line before the checkpoint")
	}
	return strings.Split(string(data[:i]), "\n"), data[i+2:], nil
}

func parseHashes(lines []string) ([]tlog.Hash, error) {
	var out []tlog.Hash
	for _, l := range lines {
		h, err := tlog.ParseHash(l)
		if err != nil {
			return nil, fail("proof hash %q: %v", l, err)
		}
		out = append(out, h)
	}
	return out, nil
}

func proofCmd(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: tlogverify proof VKEYFILE PROOFFILE [-witness VKEYFILE]... [-leaf HEX]")
	}
	vkeyFile, proofFile := args[0], args[1]
	var witnesses []string
	leafHex := ""
	for rest := args[2:]; len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 {
			return fmt.Errorf("flag %s needs a value", rest[0])
		}
		switch rest[0] {
		case "-witness":
			witnesses = append(witnesses, rest[1])
		case "-leaf":
			leafHex = rest[1]
		default:
			return fmt.Errorf("unknown flag %s", rest[0])
		}
	}
	head, msg, err := splitHead(readFile(proofFile))
	if err != nil {
		return err
	}
	if len(head) < 2 || head[0] != "c2sp.org/tlog-proof@v1" {
		return fail("not a c2sp.org/tlog-proof@v1 file")
	}
	head = head[1:]
	var extra []byte
	if strings.HasPrefix(head[0], "extra ") {
		if extra, err = base64.StdEncoding.DecodeString(head[0][len("extra "):]); err != nil {
			return fail("extra line: %v", err)
		}
		head = head[1:]
	}
	if len(head) == 0 || !strings.HasPrefix(head[0], "index ") {
		return fail("no index line")
	}
	index, err := strconv.ParseInt(head[0][len("index "):], 10, 64)
	if err != nil || index < 0 {
		return fail("index line %q", head[0])
	}
	proof, err := parseHashes(head[1:])
	if err != nil {
		return err
	}
	cp, err := openCheckpoint(vkeyFile, witnesses, msg)
	if err != nil {
		return err
	}
	var data []byte
	if leafHex != "" {
		if data, err = hex.DecodeString(leafHex); err != nil {
			return fmt.Errorf("-leaf: %v", err)
		}
	} else {
		if data, err = recordHashOf(extra, index); err != nil {
			return err
		}
	}
	if index >= cp.size {
		return fail("index %d is not below the checkpoint size %d", index, cp.size)
	}
	if err := tlog.CheckRecord(tlog.RecordProof(proof), cp.size, cp.root, index, tlog.RecordHash(data)); err != nil {
		return fail("inclusion: %v", err)
	}
	fmt.Printf("record %d included in %s at size %d\n", index, cp.origin, cp.size)
	return nil
}

// recordHashOf reads an audit export line (the extra data), recomputes its
// payload hash (SHA-256 of the payload bytes as exported) and its record hash
// (SHA-256 of the RFC 8785 text of seq, prev_hash, recorded_at, payload_hash),
// and returns the record hash's 32 bytes: the leaf's data.
func recordHashOf(line []byte, index int64) ([]byte, error) {
	if line == nil {
		return nil, fail("no extra line and no -leaf")
	}
	var rec struct {
		Seq         int64           `json:"seq"`
		RecordedAt  string          `json:"recorded_at"`
		PrevHash    string          `json:"prev_hash"`
		PayloadHash string          `json:"payload_hash"`
		RecordHash  string          `json:"record_hash"`
		Payload     json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return nil, fail("extra is not an export record: %v", err)
	}
	if rec.Seq != index {
		return nil, fail("the record is seq %d, the proof index %d", rec.Seq, index)
	}
	payload := sha256.Sum256(rec.Payload)
	if "sha256:"+hex.EncodeToString(payload[:]) != rec.PayloadHash {
		return nil, fail("the record's payload does not hash to its payload_hash")
	}
	for _, s := range []string{rec.RecordedAt, rec.PrevHash, rec.PayloadHash} {
		for _, c := range s {
			if c < 0x20 || c == '"' || c == '\\' || c > 0x7e {
				return nil, fail("unexpected character in a record field")
			}
		}
	}
	text := fmt.Sprintf(`{"payload_hash":"%s","prev_hash":"%s","recorded_at":"%s","seq":%d}`,
		rec.PayloadHash, rec.PrevHash, rec.RecordedAt, rec.Seq)
	sum := sha256.Sum256([]byte(text))
	if "sha256:"+hex.EncodeToString(sum[:]) != rec.RecordHash {
		return nil, fail("the record's fields do not hash to its record_hash")
	}
	return sum[:], nil
}

func consistencyCmd(vkeyFile, oldFile, bodyFile string) error {
	old, err := openCheckpoint(vkeyFile, nil, readFile(oldFile))
	if err != nil {
		return fmt.Errorf("old %v", err)
	}
	head, msg, err := splitHead(readFile(bodyFile))
	if err != nil {
		return err
	}
	if !strings.HasPrefix(head[0], "old ") {
		return fail("no old line")
	}
	oldSize, err := strconv.ParseInt(head[0][len("old "):], 10, 64)
	if err != nil || oldSize != old.size {
		return fail("old size %q is not the old checkpoint's %d", head[0], old.size)
	}
	proof, err := parseHashes(head[1:])
	if err != nil {
		return err
	}
	cp, err := openCheckpoint(vkeyFile, nil, msg)
	if err != nil {
		return err
	}
	if old.size == 0 {
		if len(proof) != 0 {
			return fail("a proof from size 0 must be empty")
		}
	} else if err := tlog.CheckTree(tlog.TreeProof(proof), cp.size, cp.root, old.size, old.root); err != nil {
		return fail("consistency: %v", err)
	}
	fmt.Printf("size %d is a prefix of size %d of %s\n", old.size, cp.size, cp.origin)
	return nil
}

func storedCmd(leavesFile string) error {
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	n := int64(0)
	for _, line := range strings.Fields(string(readFile(leavesFile))) {
		data, err := hex.DecodeString(line)
		if err != nil {
			return fmt.Errorf("leaf %q: %v", line, err)
		}
		hashes, err := tlog.StoredHashes(n, data, reader)
		if err != nil {
			return err
		}
		stored = append(stored, hashes...)
		n++
	}
	for _, h := range stored {
		fmt.Println(hex.EncodeToString(h[:]))
	}
	root, err := tlog.TreeHash(n, reader)
	if err != nil {
		return err
	}
	fmt.Printf("root %s\n", root)
	return nil
}
