# The metastore: PostgreSQL on RDS (one instance, Multi-AZ) or Aurora PostgreSQL,
# chosen by var.database_engine. Floe migrates its schema itself when an agent
# starts (metastore.migrate under an advisory lock), so nothing here creates tables.

locals {
  postgres_major = split(".", var.postgres_version)[0]

  # Tuned for Floe's commit path: one short transaction per flushed object that
  # inserts batch rows, and a compactor/retention that deletes them later. Those
  # insert-then-delete tables need autovacuum to keep up long before the default
  # 20% of dead rows (and to visit insert-only tables for the visibility map and
  # freezing: autovacuum_vacuum_insert_scale_factor, PG 13+).
  postgres_parameters = {
    # Durability: an acknowledged produce is a committed transaction.
    synchronous_commit = { value = "on", apply_method = "immediate" }

    autovacuum                            = { value = "1", apply_method = "immediate" }
    autovacuum_vacuum_scale_factor        = { value = "0.02", apply_method = "immediate" }
    autovacuum_vacuum_threshold           = { value = "1000", apply_method = "immediate" }
    autovacuum_vacuum_insert_scale_factor = { value = "0.05", apply_method = "immediate" }
    autovacuum_vacuum_insert_threshold    = { value = "10000", apply_method = "immediate" }
    autovacuum_analyze_scale_factor       = { value = "0.02", apply_method = "immediate" }
    autovacuum_naptime                    = { value = "10", apply_method = "immediate" }
    autovacuum_vacuum_cost_limit          = { value = "2000", apply_method = "immediate" }
    autovacuum_max_workers                = { value = "5", apply_method = "pending-reboot" }

    # Never let a stuck session hold the per-partition row locks of the sequencer.
    idle_in_transaction_session_timeout = { value = "60000", apply_method = "immediate" }
    log_min_duration_statement          = { value = "500", apply_method = "immediate" }
    log_autovacuum_min_duration         = { value = "1000", apply_method = "immediate" }
    "rds.force_ssl"                     = { value = "1", apply_method = "immediate" }
  }
}

resource "aws_db_subnet_group" "metastore" {
  name       = "${var.name}-metastore"
  subnet_ids = coalesce(var.database_subnet_ids, values(var.agent_subnets))
  tags       = local.tags
}

# -- RDS for PostgreSQL ---------------------------------------------------------------

resource "aws_db_parameter_group" "metastore" {
  count = local.aurora ? 0 : 1

  name_prefix = "${var.name}-pg${local.postgres_major}-"
  family      = "postgres${local.postgres_major}"
  description = "Floe metastore: autovacuum for insert-then-delete tables, synchronous commit"
  tags        = local.tags

  dynamic "parameter" {
    for_each = local.postgres_parameters
    content {
      name         = parameter.key
      value        = parameter.value.value
      apply_method = parameter.value.apply_method
    }
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_db_instance" "metastore" {
  count = local.aurora ? 0 : 1

  identifier     = "${var.name}-metastore"
  engine         = "postgres"
  engine_version = var.postgres_version
  instance_class = var.db_instance_class

  db_name             = var.db_name
  username            = var.db_username
  password_wo         = var.db_password
  password_wo_version = var.db_password_version

  allocated_storage     = var.db_allocated_storage
  max_allocated_storage = var.db_max_allocated_storage
  storage_type          = "gp3"
  storage_encrypted     = true
  kms_key_id            = var.kms_key_arn

  multi_az               = var.db_multi_az
  db_subnet_group_name   = aws_db_subnet_group.metastore.name
  vpc_security_group_ids = [aws_security_group.database.id]
  publicly_accessible    = false
  parameter_group_name   = aws_db_parameter_group.metastore[0].name

  backup_retention_period   = var.db_backup_retention_days
  copy_tags_to_snapshot     = true
  deletion_protection       = var.db_deletion_protection
  skip_final_snapshot       = var.db_skip_final_snapshot
  final_snapshot_identifier = "${var.name}-metastore-final"

  auto_minor_version_upgrade      = true
  performance_insights_enabled    = true
  performance_insights_kms_key_id = var.kms_key_arn
  enabled_cloudwatch_logs_exports = ["postgresql", "upgrade"]

  tags = local.tags
}

# -- Aurora PostgreSQL ----------------------------------------------------------------

resource "aws_rds_cluster_parameter_group" "metastore" {
  count = local.aurora ? 1 : 0

  name_prefix = "${var.name}-aurora-pg${local.postgres_major}-"
  family      = "aurora-postgresql${local.postgres_major}"
  description = "Floe metastore: autovacuum for insert-then-delete tables, synchronous commit"
  tags        = local.tags

  dynamic "parameter" {
    for_each = local.postgres_parameters
    content {
      name         = parameter.key
      value        = parameter.value.value
      apply_method = parameter.value.apply_method
    }
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_rds_cluster" "metastore" {
  count = local.aurora ? 1 : 0

  cluster_identifier = "${var.name}-metastore"
  engine             = "aurora-postgresql"
  engine_version     = var.postgres_version

  database_name              = var.db_name
  master_username            = var.db_username
  master_password_wo         = var.db_password
  master_password_wo_version = var.db_password_version

  storage_encrypted = true
  kms_key_id        = var.kms_key_arn

  db_subnet_group_name            = aws_db_subnet_group.metastore.name
  vpc_security_group_ids          = [aws_security_group.database.id]
  db_cluster_parameter_group_name = aws_rds_cluster_parameter_group.metastore[0].name

  backup_retention_period   = var.db_backup_retention_days
  copy_tags_to_snapshot     = true
  deletion_protection       = var.db_deletion_protection
  skip_final_snapshot       = var.db_skip_final_snapshot
  final_snapshot_identifier = "${var.name}-metastore-final"

  enabled_cloudwatch_logs_exports = ["postgresql"]

  tags = local.tags

  lifecycle {
    precondition {
      condition     = strcontains(var.postgres_version, ".")
      error_message = "Aurora needs a full engine version in postgres_version (e.g. \"16.4\"), not just a major version."
    }
  }
}

resource "aws_rds_cluster_instance" "metastore" {
  count = local.aurora ? var.aurora_instance_count : 0

  identifier         = "${var.name}-metastore-${count.index}"
  cluster_identifier = aws_rds_cluster.metastore[0].id
  engine             = aws_rds_cluster.metastore[0].engine
  engine_version     = aws_rds_cluster.metastore[0].engine_version
  instance_class     = var.db_instance_class

  db_subnet_group_name = aws_db_subnet_group.metastore.name
  publicly_accessible  = false

  auto_minor_version_upgrade      = true
  performance_insights_enabled    = true
  performance_insights_kms_key_id = var.kms_key_arn

  tags = local.tags
}
