/* ir/internal.h — what the files behind ir/ir.h share and nothing else
 * includes.
 *
 * Usage:
 *     return base_fail(err, errlen, "got %s", TYPE_STR(&n->type));
 */
#ifndef DPC_IR_INTERNAL_H
#define DPC_IR_INTERNAL_H

#include "ir/ir.h"

/* A type as text in a compound literal that lives as long as the enclosing
 * block: for error messages, several in one call. */
#define TYPE_STR(t) ir_type_str((t), (char[96]){0}, 96)

#endif
