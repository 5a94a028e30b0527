/* launch_env.h -- rank, size and rendezvous from the launcher's variables. */
#ifndef PL_LAUNCH_ENV_H
#define PL_LAUNCH_ENV_H

#include "purlin.h"

typedef struct {
  int rank, world, local_rank;
  char launcher[16];      /* "purlinrun", "torchrun", "mpirun", "slurm" */
  purlin_unique_id_t id;  /* the rendezvous to join */
} pl_launch_env_t;

/* Read the launcher's variables (in that order of precedence): purlinrun (PURLIN_RANK,
 * PURLIN_WORLD_SIZE, PURLIN_LOCAL_RANK, PURLIN_UNIQUE_ID in hex), torchrun (RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR, MASTER_PORT; rendezvous named from MASTER_ADDR:MASTER_PORT), Open MPI
 * (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK), MPICH/Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID), Slurm
 * (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, rendezvous from SLURM_JOB_ID.SLURM_STEP_ID).
 * INVALID_USAGE when none is found, INVALID_ARGUMENT (with err text) when values are malformed. */
purlin_status_t pl_launch_env_read(int timeout_ms, pl_launch_env_t *env, char *err, size_t errlen);

/* Hex encoding of an id, for PURLIN_UNIQUE_ID (256 hex chars + NUL). */
void pl_id_to_hex(const purlin_unique_id_t *id, char hex[257]);
int pl_id_from_hex(const char *hex, purlin_unique_id_t *id);

#endif
