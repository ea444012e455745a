// An oracle for tests/protocol/test_gojson.py: Go's own encoding/json on the inputs the test
// sends, one per line as "<mode> <hex>", answered one line each (hex, or "ERR").
//
//	s: the bytes as a Go string, marshalled
//	f: the 16 hex digits as float64 bits, marshalled
//	d: the bytes unmarshalled into interface{}, then marshalled
//	i: the bytes unmarshalled into IDENTIFY's struct, then marshalled
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

type identify struct {
	ClientID            string `json:"client_id"`
	Hostname            string `json:"hostname"`
	HeartbeatInterval   int    `json:"heartbeat_interval"`
	OutputBufferSize    int    `json:"output_buffer_size"`
	OutputBufferTimeout int    `json:"output_buffer_timeout"`
	FeatureNegotiation  bool   `json:"feature_negotiation"`
	TLSv1               bool   `json:"tls_v1"`
	Deflate             bool   `json:"deflate"`
	DeflateLevel        int    `json:"deflate_level"`
	Snappy              bool   `json:"snappy"`
	SampleRate          int32  `json:"sample_rate"`
	UserAgent           string `json:"user_agent"`
	MsgTimeout          int    `json:"msg_timeout"`
}

func answer(mode string, in []byte) ([]byte, error) {
	switch mode {
	case "s":
		return json.Marshal(string(in))
	case "f":
		bits, err := strconv.ParseUint(string(in), 16, 64)
		if err != nil {
			return nil, err
		}
		return json.Marshal(math.Float64frombits(bits))
	case "d":
		var v interface{}
		if err := json.Unmarshal(in, &v); err != nil {
			return nil, err
		}
		return json.Marshal(v)
	case "i":
		var v identify
		if err := json.Unmarshal(in, &v); err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		mode, arg, _ := strings.Cut(in.Text(), " ")
		raw, err := hex.DecodeString(arg)
		var got []byte
		if err == nil {
			if mode == "f" {
				raw = []byte(arg)
			}
			got, err = answer(mode, raw)
		}
		if err != nil {
			fmt.Fprintln(out, "ERR")
		} else {
			fmt.Fprintln(out, hex.EncodeToString(got))
		}
		out.Flush() // the test waits for each answer
	}
}
