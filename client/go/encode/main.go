// posenc from Go: one Encode (sinusoidal, a [2, 64, 32] float32 batch whose rows start at
// positions 0 and 1000), one EncodeStream of 8 requests, and a request without a scheme,
// each checked: the results against the paper's formula in float64, the bad request's
// status code against INVALID_ARGUMENT.
//
//	client/go/build.sh /tmp/posenc-go && /tmp/posenc-go/bin/encode 127.0.0.1:50051
//
// Exit status 0 when every check passes.
package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	posencv1 "posenc/v1"
)

// The server's default message limit: 64 MiB each way.
const maxMessageBytes = 64 << 20

// tolerance bounds |server - float64| for float32 results of this size.
const tolerance = 2e-6

func float32Tensor(values []float32, shape ...int64) *posencv1.Tensor {
	data := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	return &posencv1.Tensor{Shape: shape, Dtype: posencv1.DType_FLOAT32, Data: data}
}

func float32Values(t *posencv1.Tensor) []float32 {
	values := make([]float32, len(t.GetData())/4)
	for i := range values {
		values[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.GetData()[4*i:]))
	}
	return values
}

// maxError is the largest |y - (x + pe)| over [batch, seq, d], with token s of batch row b
// at position offsets[b] + s and pe the interleaved sinusoidal encoding (sin at even
// columns, cos at odd ones, wavelength base 10000).
func maxError(x, y []float32, batch, seq, d int, offsets []int64) float64 {
	worst := 0.0
	for b := 0; b < batch; b++ {
		for s := 0; s < seq; s++ {
			p := float64(offsets[b] + int64(s))
			for j := 0; j < d; j++ {
				angle := p * math.Pow(10000, -float64(2*(j/2))/float64(d))
				pe := math.Sin(angle)
				if j%2 == 1 {
					pe = math.Cos(angle)
				}
				i := (b*seq+s)*d + j
				worst = math.Max(worst, math.Abs(float64(y[i])-(float64(x[i])+pe)))
			}
		}
	}
	return worst
}

// randomFloats: n values in [-0.5, 0.5) from a fixed linear congruential sequence.
func randomFloats(n int, seed uint32) []float32 {
	out := make([]float32, n)
	s := seed
	for i := range out {
		s = s*1664525 + 1013904223
		out[i] = float32(float64(s)/(1<<32) - 0.5)
	}
	return out
}

func encodeOnce(ctx context.Context, client posencv1.PositionalEncodingClient) (float64, error) {
	const batch, seq, d = 2, 64, 32
	offsets := []int64{0, 1000}
	x := randomFloats(batch*seq*d, 1)
	response, err := client.Encode(ctx, &posencv1.EncodeRequest{
		RequestId: "go-encode",
		Input:     float32Tensor(x, batch, seq, d),
		Positions: &posencv1.Positions{Offsets: offsets},
		Scheme:    &posencv1.EncodeRequest_Sinusoidal{Sinusoidal: &posencv1.Sinusoidal{}},
	})
	if err != nil {
		return 0, fmt.Errorf("Encode: %w", err)
	}
	worst := maxError(x, float32Values(response.GetOutput()), batch, seq, d, offsets)
	fmt.Printf("Encode: shape %v %v, max |server - float64| = %.2e\n",
		response.GetOutput().GetShape(), response.GetOutput().GetDtype(), worst)
	return worst, nil
}

func encodeStream(ctx context.Context, client posencv1.PositionalEncodingClient, count int) (float64, error) {
	const seq, d = 16, 64
	stream, err := client.EncodeStream(ctx)
	if err != nil {
		return 0, fmt.Errorf("EncodeStream: %w", err)
	}
	inputs := make([][]float32, count)
	for i := range inputs {
		inputs[i] = randomFloats(seq*d, uint32(100+i))
		if err := stream.Send(&posencv1.EncodeRequest{
			RequestId: fmt.Sprintf("go-stream-%d", i),
			Input:     float32Tensor(inputs[i], 1, seq, d),
			Positions: &posencv1.Positions{Offsets: []int64{int64(100 * i)}},
			Scheme:    &posencv1.EncodeRequest_Sinusoidal{Sinusoidal: &posencv1.Sinusoidal{}},
		}); err != nil {
			return 0, fmt.Errorf("EncodeStream send %d: %w", i, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		return 0, err
	}
	worst := 0.0
	for i := 0; ; i++ {
		response, err := stream.Recv()
		if err == io.EOF {
			if i != count {
				return 0, fmt.Errorf("EncodeStream: %d responses for %d requests", i, count)
			}
			break
		}
		if err != nil {
			return 0, fmt.Errorf("EncodeStream receive %d: %w", i, err)
		}
		if want := fmt.Sprintf("go-stream-%d", i); response.GetRequestId() != want {
			return 0, fmt.Errorf("EncodeStream: response %d is %q, want %q (out of order)", i,
				response.GetRequestId(), want)
		}
		worst = math.Max(worst, maxError(inputs[i], float32Values(response.GetOutput()), 1, seq, d,
			[]int64{int64(100 * i)}))
	}
	fmt.Printf("EncodeStream: %d responses in order, max |server - float64| = %.2e\n", count, worst)
	return worst, nil
}

// missingScheme sends a request with no scheme set: the server answers INVALID_ARGUMENT.
func missingScheme(ctx context.Context, client posencv1.PositionalEncodingClient) error {
	_, err := client.Encode(ctx, &posencv1.EncodeRequest{
		RequestId: "go-no-scheme",
		Input:     float32Tensor(make([]float32, 8), 1, 2, 4),
	})
	if status.Code(err) != codes.InvalidArgument {
		return fmt.Errorf("a request without a scheme: got %v, want InvalidArgument", err)
	}
	fmt.Printf("no scheme: %v: %s\n", status.Code(err), status.Convert(err).Message())
	return nil
}

func run(target string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, target, grpc.WithInsecure(), grpc.WithBlock(),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageBytes),
			grpc.MaxCallSendMsgSize(maxMessageBytes)))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", target, err)
	}
	defer conn.Close()
	client := posencv1.NewPositionalEncodingClient(conn)

	errors := []float64{}
	for _, call := range []func() (float64, error){
		func() (float64, error) { return encodeOnce(ctx, client) },
		func() (float64, error) { return encodeStream(ctx, client, 8) },
	} {
		worst, err := call()
		if err != nil {
			return err
		}
		errors = append(errors, worst)
	}
	if err := missingScheme(ctx, client); err != nil {
		return err
	}
	for _, e := range errors {
		if !(e <= tolerance) {
			return fmt.Errorf("MISMATCH against the float64 reference: %.2e > %.0e", e, tolerance)
		}
	}
	fmt.Println("matches float64")
	return nil
}

func main() {
	target := "127.0.0.1:50051"
	if len(os.Args) > 1 {
		target = os.Args[1]
	}
	if err := run(target); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
