/* status.c -- names and strings of statuses, dtypes and ops, all from the tables in purlin.h. */
#include "purlin.h"

const char *purlin_status_name(purlin_status_t status) {
  switch (status) {
#define PL_STATUS_NAME_(name, value, text)                                                         \
  case PURLIN_##name: return "PURLIN_" #name;
    PURLIN_STATUS_MAP(PL_STATUS_NAME_)
#undef PL_STATUS_NAME_
  }
  return "PURLIN_UNKNOWN_STATUS";
}

const char *purlin_status_string(purlin_status_t status) {
  switch (status) {
#define PL_STATUS_TEXT_(name, value, text)                                                         \
  case PURLIN_##name: return text;
    PURLIN_STATUS_MAP(PL_STATUS_TEXT_)
#undef PL_STATUS_TEXT_
  }
  return "unknown status";
}

size_t purlin_dtype_size(purlin_dtype_t dtype) {
  switch (dtype) {
#define PL_DTYPE_SIZE_(name, suffix, bytes)                                                        \
  case PURLIN_##name: return bytes;
    PURLIN_DTYPE_MAP(PL_DTYPE_SIZE_)
#undef PL_DTYPE_SIZE_
  default: return 0;
  }
}

const char *purlin_dtype_name(purlin_dtype_t dtype) {
  switch (dtype) {
#define PL_DTYPE_NAME_(name, suffix, bytes)                                                        \
  case PURLIN_##name: return #suffix;
    PURLIN_DTYPE_MAP(PL_DTYPE_NAME_)
#undef PL_DTYPE_NAME_
  default: return "invalid";
  }
}

const char *purlin_op_name(purlin_op_t op) {
  switch (op) {
#define PL_OP_NAME_(name, suffix)                                                                  \
  case PURLIN_##name: return #suffix;
    PURLIN_OP_MAP(PL_OP_NAME_)
#undef PL_OP_NAME_
  default: return "invalid";
  }
}

purlin_status_t purlin_get_version(int *version) {
  if (!version) return PURLIN_ERR_INVALID_ARGUMENT;
  *version = PURLIN_VERSION;
  return PURLIN_OK;
}
