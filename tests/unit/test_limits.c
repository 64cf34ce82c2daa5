/* tests/unit/test_limits.c — hostile sizes: shape arithmetic that would
 * overflow int64 is refused, sizes as users write them, saturating byte
 * sums, and the memory a plan needs (passes.h fmt_memory) for a graph
 * whose buffers are known by hand. The CLI side (dpc and dprun refusing
 * absurd plans) is tests/limits_test.sh. */
#include <stdint.h>

#include "base/bytes.h"
#include "base/parse.h"
#include "passes/passes.h"
#include "tests/harness.h"

static char err[512];

TEST(numel_saturates) {
    ir_type t = ir_shape4((int64_t)1 << 24, (int64_t)1 << 24, (int64_t)1 << 24, 2);
    CHECK(ir_numel(&t) == INT64_MAX);
    t = ir_shape2((int64_t)1 << 20, (int64_t)1 << 20);
    CHECK(ir_numel(&t) == (int64_t)1 << 40);
    t = ir_shape2(0, 5);
    CHECK(ir_numel(&t) == 0);
}

TEST(shape_rule_result_too_large_is_refused) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2((int64_t)1 << 21, 8), 0);
    int w = ir_add_param(g, "w", ir_shape2((int64_t)1 << 20, 8), IR_INIT_ZERO);
    int y = ir_add_node(g, IR_OP_DENSE, (int[]){x, w}, 2, NULL, NULL, err, sizeof err);
    CHECK(y < 0);
    CHECK_STR(err, "tensor [2097152,1048576] is too large (more than 2^40 elements)");
    int w2 = ir_add_param(g, "w2", ir_shape2((int64_t)1 << 19, 8), IR_INIT_ZERO);
    CHECK(ir_add_node(g, IR_OP_DENSE, (int[]){x, w2}, 2, NULL, NULL, err, sizeof err) >=
          0); /* 2^40 */
    ir_free(g);
}

TEST(sizes_parse) {
    CHECK(base_parse_size("1000000") == 1000000);
    CHECK(base_parse_size("8G") == (int64_t)8 << 30);
    CHECK(base_parse_size("8GiB") == (int64_t)8 << 30);
    CHECK(base_parse_size("1.5 GB") == (int64_t)3 << 29);
    CHECK(base_parse_size("512m") == (int64_t)512 << 20);
    CHECK(base_parse_size("64k") == 65536);
    CHECK(base_parse_size("2T") == (int64_t)2 << 40);
    CHECK(base_parse_size("100b") == 100);
    const char *bad[] = {"", "0", "-1", "8X", "G", "1e30", "nan", "inf", "8GG", "0.1", "12 apples"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(base_parse_size(bad[i]) == -1, "'%s' -> %lld", bad[i],
                  (long long)base_parse_size(bad[i]));
    CHECK(base_parse_size(NULL) == -1);
}

TEST(byte_sums_saturate) {
    CHECK(base_bytes_add(INT64_MAX - 1, 5) == INT64_MAX);
    CHECK(base_bytes_add(3, 4) == 7);
    CHECK(base_bytes_mul((int64_t)1 << 40, (int64_t)1 << 30) == INT64_MAX);
    CHECK(base_bytes_mul(6, 7) == 42);
    char buf[32];
    CHECK_STR(base_bytes_str(100, buf, sizeof buf), "100 bytes");
    CHECK_STR(base_bytes_str((int64_t)3 << 29, buf, sizeof buf), "1.5 GiB");
    CHECK_STR(base_bytes_str(INT64_MAX, buf, sizeof buf), "8.0 EiB");
}

/* x [4,8] -> dense w [16,8] -> y [4,16] -> relu z (output): by hand, the
 * store holds w (512 bytes) and the momentum-like state s [16] (64 bytes);
 * the program holds x (128) plus y and z (256 each) unplanned, or x plus
 * the arena planned. */
TEST(memory_need_by_hand) {
    ir_graph *g = ir_new();
    int x = ir_add_input(g, "x", ir_shape2(4, 8), 0);
    int w = ir_add_param(g, "w", ir_shape2(16, 8), IR_INIT_ZERO);
    ir_add_state(g, "s", ir_shape1(16), IR_INIT_ZERO);
    int y = ir_add_node(g, IR_OP_DENSE, (int[]){x, w}, 2, NULL, NULL, err, sizeof err);
    int z = ir_add_node(g, IR_OP_RELU, (int[]){y}, 1, NULL, NULL, err, sizeof err);
    CHECK_MSG(z >= 0, "%s", err);
    if (z < 0) return;
    g->nodes[z].flags |= IR_FLAG_OUTPUT;
    CHECK(fmt_program_bytes(g, NULL) == 128 + 256 + 256);
    fmt_memplan *m = pass_memplan_run(g, err, sizeof err);
    CHECK_MSG(m != NULL, "%s", err);
    if (!m) return;
    CHECK(m->arena_bytes >= 256 && m->arena_bytes <= 512);
    CHECK(fmt_program_bytes(g, m) == 128 + m->arena_bytes);
    fmt_memory need;
    fmt_memory_need(g, m, g, NULL, &need);
    CHECK(need.params == 512 && need.state == 64);
    CHECK(need.train == 128 + m->arena_bytes && need.eval == 640);
    CHECK(need.train_batch == 4 && need.eval_batch == 4);
    CHECK(fmt_memory_total(&need) == 512 + 64 + 128 + m->arena_bytes + 640);
    char what[400], expect[400];
    fmt_memory_describe(&need, what, sizeof what);
    snprintf(expect, sizeof expect,
             "parameters 512 bytes, optimizer and BatchNorm state 64 bytes, "
             "train program %lld bytes at batch 4, eval program 640 bytes at batch 4",
             (long long)(128 + m->arena_bytes));
    CHECK_STR(what, expect);
    fmt_memplan_free(m);
    ir_free(g);
}

int main(void) {
    RUN(numel_saturates);
    RUN(shape_rule_result_too_large_is_refused);
    RUN(sizes_parse);
    RUN(byte_sums_saturate);
    RUN(memory_need_by_hand);
    return harness_done();
}
