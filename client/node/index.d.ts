// Types for posenc-client (index.js). Messages follow proto/posenc/v1/posenc.proto with its
// field names; enums are strings, int64 are numbers, bytes are Buffers.
import type * as grpcJs from '@grpc/grpc-js';

export type DType = 'DTYPE_UNSPECIFIED' | 'FLOAT32' | 'FLOAT16' | 'BFLOAT16' | 'INT32' | 'INT64';

export interface SharedMemoryRef { region: string; offset?: number; byte_size: number; }

export interface Tensor {
  shape: number[];
  dtype: DType;
  data?: Buffer | Uint8Array;
  shm?: SharedMemoryRef | null;
}

export interface Positions {
  offsets?: number[];
  ids?: number[];
  values?: number[];
  [field: string]: unknown;
}

/** One scheme message, e.g. { base: 500000, style: 'NEOX', scaling: { type: 'LLAMA3', factor: 8 } }. */
export type SchemeMessage = Record<string, unknown>;

export interface EncodeRequest {
  request_id?: string;
  input: Tensor;
  key?: Tensor;
  positions?: Positions;
  sinusoidal?: SchemeMessage;
  learned?: SchemeMessage;
  rope?: SchemeMessage;
  hierarchical?: SchemeMessage;
  continuous?: SchemeMessage;
  output_shm?: SharedMemoryRef;
  key_output_shm?: SharedMemoryRef;
  /** Further schemes of the proto's oneof, by their field name. */
  [scheme: string]: unknown;
}

export interface EncodeResponse { request_id: string; output: Tensor; key_output: Tensor | null; }

export interface BiasRequest {
  request_id?: string;
  query_length: number;
  key_length: number;
  query_offset?: number;
  alibi?: SchemeMessage;
  t5?: SchemeMessage;
  scores?: Tensor;
  [field: string]: unknown;
}

export interface BiasResponse { request_id: string; output: Tensor; }

export interface TableRequest {
  sinusoidal?: SchemeMessage;
  rope?: SchemeMessage;
  length: number;
  dim: number;
  dtype?: DType;
  rows_per_chunk?: number;
  [field: string]: unknown;
}

export interface TableChunk { first_position: number; rows: Tensor; }

export interface GraphRequest {
  request_id?: string;
  num_nodes: number;
  edges: number[];
  k?: number;
  normalized?: boolean;
  input?: Tensor;
  [field: string]: unknown;
}

export interface GraphResponse { request_id: string; output: Tensor; eigenvalues: number[]; }

export interface NamedTable { name: string; shape: number[]; dtype: DType; }

export interface ListSchemesResponse {
  schemes: string[];
  dtypes: DType[];
  tables: NamedTable[];
  [field: string]: unknown;
}

export interface CallOptions {
  /** Absolute deadline (Date or ms since the epoch). */
  deadline?: Date | number;
  /** Relative deadline in milliseconds (when no deadline is given). */
  timeoutMs?: number;
}

export interface ClientOptions {
  /** Default: insecure. */
  credentials?: grpcJs.ChannelCredentials;
  /** Send and receive message limit; default 64 MiB, the server's --max_message_bytes. */
  maxMessageBytes?: number;
  /** More grpc-js channel options, e.g. 'grpc.service_config'. */
  channelOptions?: grpcJs.ChannelOptions;
}

export declare const DEFAULT_MAX_MESSAGE_BYTES: number;

export declare class Client {
  constructor(target: string, options?: ClientOptions);
  encode(request: EncodeRequest, options?: CallOptions): Promise<EncodeResponse>;
  encodeStream(requests: Iterable<EncodeRequest> | AsyncIterable<EncodeRequest>,
               options?: CallOptions): Promise<EncodeResponse[]>;
  attentionBias(request: BiasRequest, options?: CallOptions): Promise<BiasResponse>;
  getTable(request: TableRequest, options?: CallOptions): Promise<{ chunks: TableChunk[]; rows: Tensor | null }>;
  graphEncode(request: GraphRequest, options?: CallOptions): Promise<GraphResponse>;
  listSchemes(options?: CallOptions): Promise<ListSchemesResponse>;
  health(service?: string, options?: CallOptions): Promise<string>;
  close(): void;
}

/** A Tensor from a typed array and a shape (Float32Array: FLOAT32, Int32Array: INT32). */
export declare function tensor(values: Float32Array | Int32Array | BigInt64Array | Uint16Array | Buffer,
                               shape: number[], dtype?: DType): Tensor;
export declare function toFloat32Array(t: Tensor): Float32Array;
export declare function toInt32Array(t: Tensor): Int32Array;
/** The folder holding posenc/v1/posenc.proto that the client loads. */
export declare function protoRoot(): string;
export declare const grpc: typeof grpcJs;
