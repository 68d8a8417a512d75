// TensorBoard's on-disk format, written without TensorFlow or protobuf:
//  * TFRecord framing: each record is
//      uint64 length (LE) | uint32 masked_crc32c(length bytes) (LE) | data | uint32 masked_crc32c(data) (LE)
//  * the records are serialised `tensorboard.Event` messages (event.proto / summary.proto):
//      Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//      Summary { repeated Value value = 1; }
//      Value   { string tag = 1; float simple_value = 2; }
//    encoded by hand (varints, fixed32/fixed64, length-delimited), as proto3 does.
// Pure functions: tensorboard_writer.cpp does the files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rl::metrics {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78). `crc` continues an
// earlier result: crc32c(b, crc32c(a)) == crc32c(a + b).
uint32_t crc32c(std::string_view data, uint32_t crc = 0);

// TFRecord's masked CRC: a CRC stored next to the data it covers is rotated and
// offset so that a CRC of data that itself contains CRCs stays well distributed.
inline uint32_t mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t masked_crc32c(std::string_view data) { return mask_crc(crc32c(data)); }

// Appends one framed record holding `data` to `out`.
void append_record(std::string& out, std::string_view data);

// The first record of every event file: Event{wall_time, file_version}.
inline constexpr std::string_view kFileVersion = "brain.Event:2";
std::string encode_file_version_event(double wall_time, std::string_view file_version = kFileVersion);

// Event{wall_time, step, summary{value{tag, simple_value}}}, the record
// SummaryWriter.add_scalar writes. The value is stored as float32 (the field's
// type); a tag that is not valid UTF-8 gets U+FFFD for each bad byte, since
// readers reject proto3 strings that are not UTF-8.
std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, double value);

// Protobuf wire primitives (exposed for tests).
namespace pb {
void put_varint(std::string& out, uint64_t v);
void put_key(std::string& out, uint32_t field, uint32_t wire_type);
void put_double(std::string& out, uint32_t field, double v);       // wire type 1 (fixed64)
void put_float(std::string& out, uint32_t field, float v);         // wire type 5 (fixed32)
void put_int64(std::string& out, uint32_t field, int64_t v);       // wire type 0 (varint, two's complement)
void put_bytes(std::string& out, uint32_t field, std::string_view v);  // wire type 2 (length-delimited)
}  // namespace pb

// `s` with every byte that does not start a well-formed UTF-8 sequence replaced by U+FFFD.
std::string utf8_or_replacement(std::string_view s);

}  // namespace rl::metrics
