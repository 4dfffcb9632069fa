package tinker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The SDK (0.25) asks for sample results as protobuf (Accept:
// application/x-protobuf on retrieve_future, lib/api_future_impl.py) and
// reads them as tinker_public.SampleResponse (proto/tinker_public_pb2.py,
// proto/response_conv.py):
//
//	SampleResponse:  1 sequences (SampledSequence, repeated)
//	                 2 prompt_logprobs (bytes: float32 little-endian, NaN
//	                   where undefined, optional)
//	                 3 topk_prompt_logprobs (message, optional; not read)
//	                 4 prompt_cache_hit_tokens (int32)
//	SampledSequence: 1 stop_reason (enum: 0 stop, 1 length)
//	                 2 tokens (bytes: int32 little-endian)
//	                 3 logprobs (bytes: float32 little-endian, optional)
//
// SkyRL serves the same (skyrl/tinker/proto_serialization.py) when asked.

// ProtobufAccept is the Accept header of a poll asking for a protobuf
// sample result.
const ProtobufAccept = "application/x-protobuf"

// decodeSampleResponse reads a protobuf SampleResponse into res.
func decodeSampleResponse(b []byte, res *sampleResult) error {
	*res = sampleResult{}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			var seq sampledSequence
			if err := decodeSequence(v, &seq); err != nil {
				return fmt.Errorf("sequences[%d]: %w", len(res.Sequences), err)
			}
			res.Sequences = append(res.Sequences, seq)
		case num == 2 && typ == protowire.BytesType:
			lps, err := float32s(v)
			if err != nil {
				return fmt.Errorf("prompt_logprobs: %w", err)
			}
			res.PromptLogprobs = make([]*float64, len(lps))
			for i, lp := range lps {
				if !math.IsNaN(lp) {
					res.PromptLogprobs[i] = &lps[i]
				}
			}
		}
		return nil
	})
}

func decodeSequence(b []byte, seq *sampledSequence) error {
	seq.StopReason = "stop" // enum 0, the default: absent on the wire
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			switch x {
			case 0:
				seq.StopReason = "stop"
			case 1:
				seq.StopReason = "length"
			default:
				return fmt.Errorf("stop_reason %d: want 0 (stop) or 1 (length)", x)
			}
		case num == 2 && typ == protowire.BytesType:
			if len(v)%4 != 0 {
				return fmt.Errorf("tokens: %d bytes, not int32s", len(v))
			}
			seq.Tokens = make([]int, len(v)/4)
			for i := range seq.Tokens {
				seq.Tokens[i] = int(int32(binary.LittleEndian.Uint32(v[4*i:])))
			}
		case num == 3 && typ == protowire.BytesType:
			lps, err := float32s(v)
			if err != nil {
				return fmt.Errorf("logprobs: %w", err)
			}
			seq.Logprobs = make([]*float64, len(lps))
			for i := range lps {
				seq.Logprobs[i] = &lps[i]
			}
		}
		return nil
	})
}

// eachField calls f on every field of message b (v: a length-delimited
// field's bytes; x: a varint's value); unknown fields are skipped.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// float32s reads little-endian float32s.
func float32s(v []byte) ([]float64, error) {
	if len(v)%4 != 0 {
		return nil, errors.New("not a whole number of float32s")
	}
	out := make([]float64, len(v)/4)
	for i := range out {
		out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(v[4*i:])))
	}
	return out, nil
}

// checkSampleResponse accepts a protobuf SampleResponse (the poll's check
// of a binary answer).
func checkSampleResponse(b []byte) error {
	var res sampleResult
	return decodeSampleResponse(b, &res)
}
