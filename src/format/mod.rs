//! The on-disk contract: the `.colibri` file format, version 1. This module parses and writes it;
//! it knows nothing of model semantics (that is `model/`).
//!
//! All integers are little-endian. Offsets are absolute file offsets unless stated otherwise.
//!
//! ```text
//! ┌──────────────────────────────── fixed header, 256 bytes ────────────────────────────────┐
//! 0x00  [u8; 4]  magic            "COLI"
//! 0x04  u32      version          1
//! 0x08  u32      num_experts      routed experts per MoE layer (= config.moe.n_experts)
//! 0x0C  u32      num_layers       decoder layers (= config.n_layers)
//! 0x10  u32      header_size      256 (bytes of this fixed header)
//! 0x14  u32      tensor_count     records in the tensor table (1 ..= 1_000_000)
//! 0x18  u64      routing_offset   file offset of the first router tensor (layer 0's, or the lowest
//!                                 MoE layer's); all routers follow contiguously, in layer order
//! 0x20  u64      data_offset      file offset of the first tensor's data (multiple of 4096)
//! 0x28  u64      metadata_offset  = header_size
//! 0x30  u64      metadata_size    bytes of the metadata section (≤ 256 MiB)
//! 0x38  u64      table_offset     = align8(metadata_offset + metadata_size)
//! 0x40  u64      table_size       = tensor_count × record_size
//! 0x48  u64      strings_offset   = table_offset + table_size
//! 0x50  u64      strings_size     bytes of the tensor-name string table (≤ 64 MiB)
//! 0x58  u64      file_size        total bytes of the file = end of the last tensor
//! 0x60  u32      record_size      96 (bytes of one tensor record)
//! 0x64  u32      flags            bit 0: prefix_checksum is set (written since it exists; files
//!                                 without it still load); any other set bit is rejected
//! 0x68  u32      top_k            experts chosen per token (= config.moe.top_k)
//! 0x6C  u32      num_moe_layers   layers with a router (= number of router tensors)
//! 0x70  u64      prefix_checksum  xxHash64 (seed 0) of bytes [0, data_offset) with these 8 bytes
//!                                 read as zero: header, metadata, tensor table, string table and
//!                                 padding (checked when opening); 0 when flag bit 0 is clear
//! 0x78  [u8;136] reserved         zero (checked)
//! └──────────────────────────────────────────────────────────────────────────────────────────┘
//!
//! metadata section (at metadata_offset, metadata_size bytes):
//!   0   u32  entry_count (≤ 64)      4  u32  reserved, 0
//!   8   entry_count × 32-byte entries:
//!         u32 key_len, u32 kind (1 = JSON, 2 = UTF-8 text, 3 = raw bytes),
//!         u64 key_offset, u64 value_offset, u64 value_len   (offsets relative to the section)
//!   then the key and value bytes. Keys are UTF-8, 1..=64 bytes, unique. Known keys:
//!     "config"        JSON   the model config (model::Config) — required
//!     "tokenizer"     JSON   the HuggingFace tokenizer.json
//!     "chat_template" text   the Jinja chat template
//!     "provenance"    JSON   source directory name, converter version, date, dtype, and the
//!                            quantisation applied (scheme, dtype, group size, classes, tensors)
//!     "user"          bytes  the user's metadata blob (`convert --user-metadata FILE`)
//!   Unknown keys are kept and ignored (room for extensions).
//!   zero padding up to table_offset.
//!
//! tensor table (at table_offset): tensor_count records of 96 bytes, in data order:
//!   0   u32      name_offset   into the string table      4  u32  name_len (1..=256)
//!   8   u32      dtype         0 F32, 1 F16, 2 BF16, 7 BF16R32 (bf16 in 32-row groups of
//!                              2 KiB units, `tiles`; 3..=15 otherwise reserved for float types),
//!                              16 Q8, 17 Q4, 18 Q4R8, 19 Q8R8 (block-quantised; other ids
//!                              from 20 reserved), GGUF's block types at 32 + ggml type:
//!                              34 Q4_0, 35 Q4_1, 38 Q5_0, 39 Q5_1, 40 Q8_0, 42 Q2_K,
//!                              43 Q3_K, 44 Q4_K, 45 Q5_K, 46 Q6_K, 52 IQ4_NL, 55 IQ4_XS,
//!                              71 MXFP4; 23 Q4_KR8, 26 Q6_KR8 (q4_k / q6_k in 8-row
//!                              interleaved units, `kr8`; 25 was q6_kr8's earlier unit
//!                              layout, refused), 24 MXFP4R8, 27 IQ4_XSR8, 28 IQ4_NLR8
//!                              (iq4_xs / iq4_nl in 8-row interleaved units, `kr8`)
//!   12  u32      ndim          1..=4
//!   16  u64[4]   dims          outermost first; unused dims are 0; used dims ≥ 1
//!   48  u64      data_offset   absolute; multiple of 64 (4096 for expert stacks)
//!   56  u64      byte_length
//!   64  u64      expert_stride bytes between consecutive experts of an expert stack, else 0
//!   72  u64      checksum      xxHash64 (seed 0) of the byte_length bytes at data_offset
//!   80  u32      group_size    elements per quantisation block: 32 for block dtypes (256 for
//!                              the K-quants and IQ4_XS), 0 for floats
//!   84  u32      kind          0 plain, 1 router, 2 expert stack
//!   88  u64      reserved      0
//!
//! string table (at strings_offset, strings_size bytes): tensor names, UTF-8, no NUL.
//!
//! data (from data_offset = align4096(strings_offset + strings_size)): the tensors in table order.
//!   Tensor i+1 starts exactly at align(end of tensor i, its alignment): 64 bytes for plain and router
//!   tensors, 4096 for expert stacks. Padding bytes are zero. The file ends exactly at the end of the
//!   last tensor. An expert stack has shape [E, rows, cols]; expert e's matrix (rows × cols, row-major)
//!   starts at data_offset + e × expert_stride, expert_stride is a multiple of 4096, and
//!   byte_length = expert_stride × (E − 1) + (bytes of one expert); the gap after each expert is zero.
//!   Router tensors ([E, hidden]) come first, contiguously in layer order, starting at routing_offset.
//!
//! block-quantised tensors (Q8, Q4, Q8R8, Q4R8 and GGUF's types, MXFP4 among them): a 2-D matrix
//!   [rows, cols] or an expert stack [E, rows, cols], cols a multiple of the block (32; 256 for
//!   the K-quants and IQ4_XS), rows a multiple of the dtype's row group (8 for Q8R8 / Q4R8). Each
//!   matrix (the tensor, or each expert of a stack at its 4096-aligned stride) is self-contained;
//!   its bytes are laid out as format::blocks describes (format::ggml for GGUF's types and
//!   format::mxfp4 for MXFP4, kept as ggml stores them: the descriptions of the block layouts,
//!   with the reference quantisers and dequantisers). Only
//!   attention q/k/v/o, routed expert stacks, shared-expert gate/up/down, dense MLP gate/up/down
//!   and lm_head may be quantised; routers, the shared expert gate, norms, biases and the
//!   embedding table stay float. Every dtype's id, block geometry and meaning is one row of the
//!   table in format::dtype.
//! ```
//!
//! Validation order when opening: header (against the real file size) → section layout →
//! metadata entries → tensor records and names → data layout. Nothing past the string table is
//! read by [`parse`]; checksums, padding and NaN/Inf scans of the data (float elements and block
//! scales) are done by the full validation.

mod aligned;
pub mod blocks;
mod chunked;
mod dtype;
mod finite;
pub mod ggml;
mod header;
pub mod kr8;
mod le;
mod metadata;
pub mod mxfp4;
mod parse;
mod table;
pub mod tiles;
mod writer;

pub use aligned::{direct_io_wanted, AlignedBuf, ALIGN as IO_ALIGN};
pub use dtype::{DType, DTypeInfo, Packing, GROUP};
pub use finite::{find_nonfinite as find_nonfinite_in, NonFinite};
pub use header::{
    prefix_checksum, Header, FLAG_PREFIX_CHECKSUM, HEADER_SIZE, KNOWN_FLAGS, MAGIC, PREFIX_CHECKSUM_OFFSET,
    RESERVED_OFFSET, VERSION,
};
pub use metadata::{MetaEntry, MetaKind, MAX_META_ENTRIES, MAX_META_KEY};
pub use parse::{parse, verify_data, verify_data_with, verify_prefix, ParsedFile};
pub use table::{TensorKind, TensorRecord, MAX_NAME_LEN, MAX_NDIM, RECORD_SIZE};
pub use writer::{FileWriter, PlannedTensor, WriteSummary};

/// Alignment of every tensor's data.
pub const TENSOR_ALIGN: u64 = 64;
/// Alignment of expert stacks, of each expert inside them, and of the data section.
pub const EXPERT_ALIGN: u64 = 4096;
/// Cap on the metadata section.
pub const MAX_METADATA_SIZE: u64 = 256 << 20;
/// Cap on the string table.
pub const MAX_STRINGS_SIZE: u64 = 64 << 20;
/// Cap on the number of tensors.
pub const MAX_TENSORS: u64 = 1_000_000;

/// Round `x` up to a multiple of `align` (a power of two); `None` on overflow.
pub fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    Some(x.checked_add(align - 1)? & !(align - 1))
}
