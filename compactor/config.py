"""Typed, frozen configuration of the compactor (env ``FLOE_COMPACTOR_*``, CLI flags).

Defaults follow the issue: an L0->L1 merge once ~32 agent segments exist, an
L1->L2 merge after ~32 L1 objects; replaced objects are deleted only after a
grace period far longer than any reader's batch-lookup cache (the agent's
``metadata_cache_ms`` is 100 ms by default) or in-flight fetch.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024


class CompactorConfig(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FLOE_COMPACTOR_", frozen=True, extra="forbid")

    l0_trigger: int = Field(
        default=32, ge=1, description="Merge L0 objects when at least this many exist"
    )
    l1_trigger: int = Field(
        default=32, ge=1, description="Merge L1 objects when at least this many exist"
    )
    max_inputs: int = Field(default=32, ge=1, description="Objects per merge task")
    max_input_bytes: int = Field(default=1024 * MiB, gt=0, description="Input bytes per merge task")
    l1_target_bytes: int = Field(
        default=128 * MiB, gt=0, description="Split L1 outputs at this size"
    )
    l2_target_bytes: int = Field(
        default=512 * MiB, gt=0, description="Split L2 outputs at this size"
    )

    parquet_min_level: int = Field(
        default=1, ge=0, description="Convert segment data of this level and up"
    )
    parquet_min_batches: int = Field(
        default=1, ge=1, description="Convert a partition once it has this many batches"
    )
    parquet_max_batches: int = Field(
        default=200_000, ge=1, description="Batches per Parquet file at most"
    )
    row_group_rows: int = Field(default=16_384, ge=1, description="Parquet row group size (rows)")

    # Parquet merges (compactor.parquet_plan): small Parquet objects of a partition,
    # adjacent in offsets, merged by size tier (``parquet_merge_factor`` of a tier
    # make one of the next) and, once a partition went quiet, all at once.
    parquet_merge_enable: bool = Field(default=True, description="Merge small Parquet objects")
    parquet_merge_small_bytes: int = Field(
        default=8 * MiB, gt=0, description="Parquet objects below this size are merged"
    )
    parquet_merge_target_bytes: int = Field(
        default=64 * MiB, gt=0, description="Input bytes of one merged Parquet object at most"
    )
    parquet_merge_factor: int = Field(
        default=8, ge=2, description="Objects of one size tier merged into one of the next"
    )
    parquet_merge_min_age_ms: int = Field(
        default=60_000, ge=0, description="Parquet objects younger than this are not merged"
    )
    parquet_merge_quiet_ms: int = Field(
        default=3_600_000,
        ge=0,
        description="Small objects all older than this are merged whatever their tier",
    )

    delete_grace_ms: int = Field(
        default=300_000, ge=0, description="Keep replaced objects this long"
    )
    orphan_grace_ms: int = Field(
        default=3_600_000, ge=0, description="Unregistered objects older than this are orphans"
    )
    orphan_prefix: str = Field(default="", description="Only list this prefix for orphans")
    retention_max_batches: int = Field(
        default=10_000, ge=1, description="Batch rows one retention step may remove"
    )

    max_attempts: int = Field(
        default=3, ge=1, description="Re-plans of a phase after swap conflicts"
    )
    concurrency: int = Field(default=4, ge=1, description="Tasks run at once (in-process runner)")
    read_concurrency: int = Field(default=8, ge=1, description="Concurrent GETs per task")
    interval_ms: int = Field(
        default=10_000, ge=0, description="Pause between passes of `floe compactor run`"
    )
    key_prefix: str = Field(
        default="compacted/", description="Prefix of segment objects the compactor writes"
    )
    parquet_prefix: str = Field(default="parquet/", description="Prefix of Parquet objects")
