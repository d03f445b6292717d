// posenc from Java: one Encode (sinusoidal, a [2, 64, 32] float32 batch whose rows start at
// positions 0 and 1000), one EncodeStream of 8 requests, and a request without a scheme,
// each checked: the results against the paper's formula in float64, the bad request's
// status code against INVALID_ARGUMENT.
//
//   client/java/build.sh /tmp/posenc-java && client/java/run.sh /tmp/posenc-java 127.0.0.1:50051
//
// Exit status 0 when every check passes.
package dev.posenc.example;

import com.google.protobuf.ByteString;
import dev.posenc.v1.DType;
import dev.posenc.v1.EncodeRequest;
import dev.posenc.v1.EncodeResponse;
import dev.posenc.v1.PositionalEncodingGrpc;
import dev.posenc.v1.Positions;
import dev.posenc.v1.Sinusoidal;
import dev.posenc.v1.Tensor;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.StreamObserver;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

public final class EncodeExample {
  // The server's default message limit: 64 MiB each way.
  private static final int MAX_MESSAGE_BYTES = 64 << 20;
  // Bounds |server - float64| for float32 results of this size.
  private static final double TOLERANCE = 2e-6;

  private static Tensor float32Tensor(float[] values, long... shape) {
    ByteBuffer data = ByteBuffer.allocate(4 * values.length).order(ByteOrder.LITTLE_ENDIAN);
    for (float v : values) data.putFloat(v);
    data.flip();
    Tensor.Builder t = Tensor.newBuilder().setDtype(DType.FLOAT32).setData(ByteString.copyFrom(data));
    for (long s : shape) t.addShape(s);
    return t.build();
  }

  private static float[] float32Values(Tensor t) {
    ByteBuffer data = t.getData().asReadOnlyByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
    float[] values = new float[data.remaining() / 4];
    for (int i = 0; i < values.length; i++) values[i] = data.getFloat();
    return values;
  }

  // The largest |y - (x + pe)| over [batch, seq, d], with token s of batch row b at position
  // offsets[b] + s and pe the interleaved sinusoidal encoding (sin at even columns, cos at
  // odd ones, wavelength base 10000).
  private static double maxError(float[] x, float[] y, int batch, int seq, int d, long[] offsets) {
    if (y.length != x.length) return Double.POSITIVE_INFINITY;
    double worst = 0;
    for (int b = 0; b < batch; b++) {
      for (int s = 0; s < seq; s++) {
        double p = offsets[b] + s;
        for (int j = 0; j < d; j++) {
          double angle = p * Math.pow(10000, -(double) (2 * (j / 2)) / d);
          double pe = j % 2 == 0 ? Math.sin(angle) : Math.cos(angle);
          int i = (b * seq + s) * d + j;
          worst = Math.max(worst, Math.abs(y[i] - (x[i] + pe)));
        }
      }
    }
    return worst;
  }

  // n values in [-0.5, 0.5) from a fixed linear congruential sequence.
  private static float[] randomFloats(int n, int seed) {
    float[] out = new float[n];
    long s = seed & 0xffffffffL;
    for (int i = 0; i < n; i++) {
      s = (s * 1664525L + 1013904223L) & 0xffffffffL;
      out[i] = (float) (s / 4294967296.0 - 0.5);
    }
    return out;
  }

  private static double encodeOnce(PositionalEncodingGrpc.PositionalEncodingBlockingStub stub) {
    final int batch = 2, seq = 64, d = 32;
    final long[] offsets = {0, 1000};
    float[] x = randomFloats(batch * seq * d, 1);
    EncodeResponse response = stub.encode(EncodeRequest.newBuilder()
        .setRequestId("java-encode")
        .setInput(float32Tensor(x, batch, seq, d))
        .setPositions(Positions.newBuilder().addOffsets(offsets[0]).addOffsets(offsets[1]))
        .setSinusoidal(Sinusoidal.getDefaultInstance())
        .build());
    double worst = maxError(x, float32Values(response.getOutput()), batch, seq, d, offsets);
    System.out.printf("Encode: shape %s %s, max |server - float64| = %.2e%n",
        response.getOutput().getShapeList(), response.getOutput().getDtype(), worst);
    return worst;
  }

  private static double encodeStream(PositionalEncodingGrpc.PositionalEncodingStub stub, int count)
      throws Exception {
    final int seq = 16, d = 64;
    List<EncodeResponse> responses = new ArrayList<>();
    CompletableFuture<Void> done = new CompletableFuture<>();
    StreamObserver<EncodeRequest> requests = stub.encodeStream(new StreamObserver<EncodeResponse>() {
      @Override public void onNext(EncodeResponse r) { synchronized (responses) { responses.add(r); } }
      @Override public void onError(Throwable t) { done.completeExceptionally(t); }
      @Override public void onCompleted() { done.complete(null); }
    });
    List<float[]> inputs = new ArrayList<>();
    for (int i = 0; i < count; i++) {
      inputs.add(randomFloats(seq * d, 100 + i));
      requests.onNext(EncodeRequest.newBuilder()
          .setRequestId("java-stream-" + i)
          .setInput(float32Tensor(inputs.get(i), 1, seq, d))
          .setPositions(Positions.newBuilder().addOffsets(100L * i))
          .setSinusoidal(Sinusoidal.getDefaultInstance())
          .build());
    }
    requests.onCompleted();
    done.get(30, TimeUnit.SECONDS);
    if (responses.size() != count) {
      throw new IllegalStateException(responses.size() + " responses for " + count + " requests");
    }
    double worst = 0;
    for (int i = 0; i < count; i++) {
      EncodeResponse r = responses.get(i);
      if (!r.getRequestId().equals("java-stream-" + i)) {
        throw new IllegalStateException("response " + i + " is " + r.getRequestId() + ": out of order");
      }
      worst = Math.max(worst, maxError(inputs.get(i), float32Values(r.getOutput()), 1, seq, d,
          new long[] {100L * i}));
    }
    System.out.printf("EncodeStream: %d responses in order, max |server - float64| = %.2e%n",
        count, worst);
    return worst;
  }

  // A request with no scheme set: the server answers INVALID_ARGUMENT.
  private static void missingScheme(PositionalEncodingGrpc.PositionalEncodingBlockingStub stub) {
    try {
      stub.encode(EncodeRequest.newBuilder()
          .setRequestId("java-no-scheme")
          .setInput(float32Tensor(new float[8], 1, 2, 4))
          .build());
    } catch (StatusRuntimeException e) {
      if (e.getStatus().getCode() != Status.Code.INVALID_ARGUMENT) throw e;
      System.out.println("no scheme: " + e.getStatus().getCode() + ": " + e.getStatus().getDescription());
      return;
    }
    throw new IllegalStateException("a request without a scheme succeeded");
  }

  public static void main(String[] args) throws Exception {
    String target = args.length > 0 ? args[0] : "127.0.0.1:50051";
    ManagedChannel channel = ManagedChannelBuilder.forTarget(target)
        .usePlaintext()
        .maxInboundMessageSize(MAX_MESSAGE_BYTES)
        .build();
    int status = 0;
    try {
      PositionalEncodingGrpc.PositionalEncodingBlockingStub blocking =
          PositionalEncodingGrpc.newBlockingStub(channel)
              .withDeadlineAfter(30, TimeUnit.SECONDS)
              .withMaxOutboundMessageSize(MAX_MESSAGE_BYTES);
      double[] errors = {encodeOnce(blocking),
                         encodeStream(PositionalEncodingGrpc.newStub(channel)
                             .withDeadlineAfter(30, TimeUnit.SECONDS), 8)};
      missingScheme(blocking);
      for (double e : errors) {
        if (!(e <= TOLERANCE)) {
          System.err.printf("MISMATCH against the float64 reference: %.2e > %.0e%n", e, TOLERANCE);
          status = 1;
        }
      }
      if (status == 0) System.out.println("matches float64");
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
    System.exit(status);
  }
}
