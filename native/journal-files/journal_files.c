// The write-ahead journal's natives (src/journal/native.ts says what each is for and what it saved):
//   allocateFile(fd, bytes)  the file's blocks up to `bytes` allocated on the disk (posix_fallocate)
//   mapFile(fd, bytes)       an ArrayBuffer over the file's first `bytes` bytes, shared with it (MAP_SHARED)
//   unmapFile(arrayBuffer)   detaches what mapFile returned and unmaps it, now rather than at its GC
//   crc32c(first, second?)   CRC-32C of one Uint8Array, then another
//   sealRecord(head, n, data) a record's two checks written into its head's first n bytes, in one call (src/journal/record.ts)
//   lockFile(fd)             an exclusive flock(2) on the file, without waiting: true, or false when another holds it
//   hardware                 whether crc32c uses the CPU's instruction (SSE 4.2)
//
// Node-API only (no V8 or NAN headers): the ABI is stable across Node versions, so one build serves
// Node 20, 22 and 24. Errors from the system are thrown as Node throws its own: an Error with `code`
// (ENOSPC...), `errno` and `syscall`.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>

#include <node_api.h>

// Stops the calling function with a JavaScript exception when a Node-API call fails.
#define CALL(env, call)                                                 \
  do {                                                                  \
    if ((call) != napi_ok) {                                            \
      throw_last_error(env, #call);                                     \
      return NULL;                                                      \
    }                                                                   \
  } while (0)

static void throw_last_error(napi_env env, const char* call) {
  bool pending = false;
  napi_is_exception_pending(env, &pending);
  if (pending) return;
  const napi_extended_error_info* info = NULL;
  napi_get_last_error_info(env, &info);
  char message[256];
  snprintf(message, sizeof message, "journal-files: %s failed: %s", call,
           info != NULL && info->error_message != NULL ? info->error_message : "unknown Node-API error");
  napi_throw_error(env, NULL, message);
}

static const char* errno_name(int err) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  const char* name = strerrorname_np(err);
  if (name != NULL) return name;
#endif
  return "EUNKNOWN";
}

// Throws `syscall: message` with code, errno and syscall set, as Node's fs errors are.
static napi_value throw_errno(napi_env env, int err, const char* syscall) {
  char text[256];
  snprintf(text, sizeof text, "%s: %s, %s", errno_name(err), strerror(err), syscall);
  napi_value message, code, error, errno_value, syscall_value;
  if (napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &message) != napi_ok ||
      napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code) != napi_ok ||
      napi_create_error(env, code, message, &error) != napi_ok ||
      napi_create_int32(env, -err, &errno_value) != napi_ok ||
      napi_create_string_utf8(env, syscall, NAPI_AUTO_LENGTH, &syscall_value) != napi_ok ||
      napi_set_named_property(env, error, "errno", errno_value) != napi_ok ||
      napi_set_named_property(env, error, "syscall", syscall_value) != napi_ok) {
    throw_last_error(env, "creating an errno error");
    return NULL;
  }
  napi_throw(env, error);
  return NULL;
}

// The arguments of a call, at most `N`; `argc` says how many were given.
#define ARGS(N)                                                          \
  size_t argc = N;                                                       \
  napi_value argv[N];                                                    \
  CALL(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL))

// A file descriptor and a byte count, the arguments of allocateFile and mapFile.
static bool fd_and_bytes(napi_env env, napi_callback_info info, int32_t* fd, size_t* bytes) {
  size_t argc = 2;
  napi_value argv[2];
  double count = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_int32(env, argv[0], fd) != napi_ok || napi_get_value_double(env, argv[1], &count) != napi_ok ||
      !(count > 0) || count > (double)SIZE_MAX) {
    napi_throw_type_error(env, NULL, "journal-files: (fd, bytes): a file descriptor and a positive byte count");
    return false;
  }
  *bytes = (size_t)count;
  return true;
}

static napi_value allocate_file(napi_env env, napi_callback_info info) {
  int32_t fd;
  size_t bytes;
  if (!fd_and_bytes(env, info, &fd, &bytes)) return NULL;
#if defined(__linux__)
  int err = posix_fallocate(fd, 0, (off_t)bytes);
  if (err != 0) return throw_errno(env, err, "posix_fallocate");
  return NULL;
#else
  return throw_errno(env, ENOTSUP, "posix_fallocate");
#endif
}

// An exclusive lock on the whole file, as Kafka's log directories and PostgreSQL's data directory are
// held: flock(2) locks belong to the open file description, so a second open of the file (another
// process, or this one) is refused, and the kernel releases the lock when the holder's descriptor is
// closed, at its exit or its death. false when another holds it; an errno error otherwise.
static napi_value lock_file(napi_env env, napi_callback_info info) {
  ARGS(1);
  int32_t fd = -1;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    napi_throw_type_error(env, NULL, "journal-files: lockFile takes a file descriptor");
    return NULL;
  }
  int rc;
  do rc = flock(fd, LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  bool locked = rc == 0;
  if (!locked && errno != EWOULDBLOCK) return throw_errno(env, errno, "flock");
  napi_value result;
  CALL(env, napi_get_boolean(env, locked, &result));
  return result;
}

// --- mappings --------------------------------------------------------------------------------
// A mapping is unmapped by unmapFile (the journal is done with a segment) or, if it never was, when
// its ArrayBuffer is collected. Detaching the buffer does not tell us when V8 frees it, so the live
// mappings are listed here: unmapFile unmaps at once and marks it, the finalizer unmaps only what is
// still mapped. One list per thread: a finalizer runs on the thread that made the buffer.

struct mapping {
  void* address;
  size_t bytes;
  bool mapped;
  struct mapping* next;
};

static _Thread_local struct mapping* mappings = NULL;

static void forget_mapping(struct mapping* m) {
  for (struct mapping** at = &mappings; *at != NULL; at = &(*at)->next) {
    if (*at == m) {
      *at = m->next;
      return;
    }
  }
}

static void finalize_mapping(napi_env env, void* data, void* hint) {
  (void)env;
  (void)data;
  struct mapping* m = hint;
  if (m->mapped) munmap(m->address, m->bytes);
  forget_mapping(m);
  free(m);
}

static napi_value map_file(napi_env env, napi_callback_info info) {
  int32_t fd;
  size_t bytes;
  if (!fd_and_bytes(env, info, &fd, &bytes)) return NULL;
  struct mapping* m = malloc(sizeof *m);
  if (m == NULL) return throw_errno(env, ENOMEM, "malloc");
  void* address = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    int err = errno;
    free(m);
    return throw_errno(env, err, "mmap");
  }
  *m = (struct mapping){ .address = address, .bytes = bytes, .mapped = true, .next = mappings };
  napi_value buffer;
  if (napi_create_external_arraybuffer(env, address, bytes, finalize_mapping, m, &buffer) != napi_ok) {
    munmap(address, bytes);
    free(m);
    throw_last_error(env, "napi_create_external_arraybuffer");
    return NULL;
  }
  mappings = m;
  return buffer;
}

static napi_value unmap_file(napi_env env, napi_callback_info info) {
  ARGS(1);
  bool is_buffer = false;
  if (argc < 1 || napi_is_arraybuffer(env, argv[0], &is_buffer) != napi_ok || !is_buffer) {
    napi_throw_type_error(env, NULL, "journal-files: unmapFile takes the ArrayBuffer mapFile returned");
    return NULL;
  }
  void* address = NULL;
  CALL(env, napi_get_arraybuffer_info(env, argv[0], &address, NULL));
  struct mapping* m = mappings;
  while (m != NULL && !(m->mapped && m->address == address)) m = m->next;
  if (m == NULL) return NULL;  // detached already, or not a mapping: nothing to unmap
  CALL(env, napi_detach_arraybuffer(env, argv[0]));
  munmap(m->address, m->bytes);
  m->mapped = false;
  return NULL;
}

// --- CRC-32C (Castagnoli): the journal records' checksum -------------------------------------

static uint32_t crc32c_table[256];

static void crc32c_init_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc32c_table[i] = c;
  }
}

static uint32_t crc32c_software(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  while (n--) crc = (crc >> 8) ^ crc32c_table[(crc ^ *p++) & 0xff];
  return ~crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hardware(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ~crc & 0xffffffffu;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#define HAS_CRC32C_INSTRUCTION() __builtin_cpu_supports("sse4.2")
#else
static uint32_t crc32c_hardware(uint32_t crc, const uint8_t* p, size_t n) { return crc32c_software(crc, p, n); }
#define HAS_CRC32C_INSTRUCTION() 0
#endif

static bool hardware = false;
static uint32_t crc32c_of(const uint8_t* p, size_t n, uint32_t crc);

static napi_value crc32c(napi_env env, napi_callback_info info) {
  ARGS(2);
  uint32_t crc = 0;
  for (size_t i = 0; i < argc; i++) {
    napi_typedarray_type kind;
    size_t length = 0;
    void* data = NULL;
    // One Node-API call per argument on the way that counts: a record of one point costs less to
    // checksum than a call.
    if (napi_get_typedarray_info(env, argv[i], &kind, &length, &data, NULL, NULL) != napi_ok || kind != napi_uint8_array) {
      napi_valuetype type = napi_object;
      if (i == 1 && napi_typeof(env, argv[i], &type) == napi_ok && type == napi_undefined) break;
      napi_throw_type_error(env, NULL, "journal-files: crc32c takes one or two Uint8Arrays");
      return NULL;
    }
    crc = crc32c_of(data, length, crc);
  }
  napi_value result;
  CALL(env, napi_create_uint32(env, crc, &result));
  return result;
}

static uint32_t crc32c_of(const uint8_t* p, size_t n, uint32_t crc) {
  return hardware ? crc32c_hardware(crc, p, n) : crc32c_software(crc, p, n);
}

static void put_u32le(uint8_t* at, uint32_t v) {
  at[0] = (uint8_t)v;
  at[1] = (uint8_t)(v >> 8);
  at[2] = (uint8_t)(v >> 16);
  at[3] = (uint8_t)(v >> 24);
}

// The two checks of a record (src/journal/record.ts has the layout): the body's, CRC-32C of the head's
// first headBytes bytes past its 40-byte header (the offsets) and then the data, written at byte 32;
// then the header's,
// CRC-32C of header bytes 8 to 40 (the body's check among them), written at byte 4. One call, as the
// journal made one call for its single check before: a record of one point costs less to checksum
// than a call.
#define RECORD_HEADER_BYTES 40
static napi_value seal_record(napi_env env, napi_callback_info info) {
  ARGS(3);
  uint8_t* head = NULL;
  uint8_t* data = NULL;
  size_t head_length = 0, data_length = 0;
  uint32_t head_bytes = 0;
  napi_typedarray_type kind_head, kind_data;
  if (argc < 3 || napi_get_typedarray_info(env, argv[0], &kind_head, &head_length, (void**)&head, NULL, NULL) != napi_ok ||
      kind_head != napi_uint8_array || napi_get_value_uint32(env, argv[1], &head_bytes) != napi_ok ||
      napi_get_typedarray_info(env, argv[2], &kind_data, &data_length, (void**)&data, NULL, NULL) != napi_ok ||
      kind_data != napi_uint8_array) {
    napi_throw_type_error(env, NULL, "journal-files: sealRecord(head, headBytes, data): a Uint8Array, its bytes in use, a Uint8Array");
    return NULL;
  }
  if (head_bytes < RECORD_HEADER_BYTES || head_bytes > head_length) {
    napi_throw_range_error(env, NULL, "journal-files: sealRecord: headBytes must be at least 40 and within the head");
    return NULL;
  }
  uint32_t body = crc32c_of(head + RECORD_HEADER_BYTES, head_bytes - RECORD_HEADER_BYTES, 0);
  body = crc32c_of(data, data_length, body);
  put_u32le(head + 32, body);
  put_u32le(head + 4, crc32c_of(head + 8, RECORD_HEADER_BYTES - 8, 0));
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  crc32c_init_table();
  hardware = HAS_CRC32C_INSTRUCTION();
  napi_value has_hardware;
  CALL(env, napi_get_boolean(env, hardware, &has_hardware));
  napi_property_descriptor properties[] = {
    { "allocateFile", NULL, allocate_file, NULL, NULL, NULL, napi_enumerable, NULL },
    { "mapFile", NULL, map_file, NULL, NULL, NULL, napi_enumerable, NULL },
    { "unmapFile", NULL, unmap_file, NULL, NULL, NULL, napi_enumerable, NULL },
    { "crc32c", NULL, crc32c, NULL, NULL, NULL, napi_enumerable, NULL },
    { "sealRecord", NULL, seal_record, NULL, NULL, NULL, napi_enumerable, NULL },
    { "lockFile", NULL, lock_file, NULL, NULL, NULL, napi_enumerable, NULL },
    { "hardware", NULL, NULL, NULL, NULL, has_hardware, napi_enumerable, NULL },
  };
  CALL(env, napi_define_properties(env, exports, sizeof properties / sizeof *properties, properties));
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
