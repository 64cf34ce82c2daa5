/* placeholder while writing */
#include "runtime/train.h"
rt_train_options rt_train_defaults(void) { rt_train_options o = {0}; return o; }
int rt_train_schedule(const dpc_plan *plan, const rt_train_options *o, ir_train *t, char *err, size_t errlen) { (void)plan; (void)o; (void)t; (void)err; (void)errlen; return -1; }
int rt_train(const dpc_plan *plan, const rt_train_options *o) { (void)plan; (void)o; return 1; }
