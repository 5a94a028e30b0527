/* tune.h -- codesign tables per datapath and world size. */
#ifndef PL_TUNE_H
#define PL_TUNE_H

#include "plan.h"
#include "purlin.h"

/* Fill t for this datapath and world size (table, then PURLIN_* overrides). The result must be
 * the same on every rank: it is exchanged and checked at init. */
void pl_tune_get(purlin_datapath_t datapath, int world, pl_tune_t *t);

#endif
