# Secrets Manager: the metastore DSN (injected into the agents as FLOE_METASTORE
# by ECS), the peer credential (FLOE_PEER_TOKEN: the shared secret of the
# agents' peer routes, /blocks and /kafka) and, optionally, the SASL users. Both values are write-only attributes
# fed from ephemeral variables: they never appear in Terraform state or plans.
# Rotation = bump db_password_version / sasl_users_version (docs/operations.md).

resource "aws_secretsmanager_secret" "metastore_dsn" {
  name_prefix             = "${var.name}/metastore-dsn-"
  description             = "Floe metastore DSN (postgresql://user:password@host:port/db), read by the agents as FLOE_METASTORE"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = var.secret_recovery_window_days
  tags                    = local.tags
}

resource "aws_secretsmanager_secret_version" "metastore_dsn" {
  secret_id                = aws_secretsmanager_secret.metastore_dsn.id
  secret_string_wo         = "postgresql://${var.db_username}:${urlencode(var.db_password)}@${local.db_address}:${local.db_port}/${var.db_name}?sslmode=${var.db_sslmode}&sslrootcert=${var.db_ca_bundle_path}"
  secret_string_wo_version = var.db_password_version
}

resource "aws_secretsmanager_secret" "internal_token" {
  count = var.internal_token_secret_arn == null ? 1 : 0

  name_prefix             = "${var.name}/internal-token-"
  description             = "Floe peer credential: the shared secret agents send to each other's admin port (/blocks, /kafka), read as FLOE_PEER_TOKEN"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = var.secret_recovery_window_days
  tags                    = local.tags
}

resource "aws_secretsmanager_secret_version" "internal_token" {
  count = var.internal_token_secret_arn == null ? 1 : 0

  secret_id                = aws_secretsmanager_secret.internal_token[0].id
  secret_string_wo         = var.internal_token
  secret_string_wo_version = var.internal_token_version

  lifecycle {
    precondition {
      condition     = var.internal_token != null
      error_message = "set internal_token (the module writes it to a secret) or internal_token_secret_arn (an existing secret)."
    }
  }
}

# TLS certificate and key of the agents' listener (enable_tls): injected as
# TLS_CERT_PEM / TLS_KEY_PEM, which `floe agent` writes to FLOE_SSL_CERTFILE /
# FLOE_SSL_KEYFILE (files only the agent's user can read) before it starts, in
# the task's ephemeral TLS volume (ecs.tf; the root filesystem is read-only).
resource "aws_secretsmanager_secret" "tls" {
  for_each = var.enable_tls ? toset(["certificate", "private-key"]) : toset([])

  name_prefix             = "${var.name}/tls-${each.key}-"
  description             = "Floe agents' TLS ${each.key} (PEM), read as ${each.key == "certificate" ? "TLS_CERT_PEM" : "TLS_KEY_PEM"}"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = var.secret_recovery_window_days
  tags                    = local.tags
}

resource "aws_secretsmanager_secret_version" "tls" {
  for_each = var.enable_tls ? toset(["certificate", "private-key"]) : toset([])

  secret_id                = aws_secretsmanager_secret.tls[each.key].id
  secret_string_wo         = each.key == "certificate" ? var.tls_certificate_pem : var.tls_private_key_pem
  secret_string_wo_version = var.tls_version

  lifecycle {
    precondition {
      condition     = var.tls_certificate_pem != null && var.tls_private_key_pem != null
      error_message = "enable_tls = true needs tls_certificate_pem and tls_private_key_pem."
    }
  }
}

resource "aws_secretsmanager_secret" "sasl_users" {
  count = var.enable_sasl ? 1 : 0

  name_prefix             = "${var.name}/sasl-users-"
  description             = "Floe SASL users: JSON object {user: password}, read by the agents as FLOE_SASL_USERS"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = var.secret_recovery_window_days
  tags                    = local.tags
}

resource "aws_secretsmanager_secret_version" "sasl_users" {
  count = var.enable_sasl ? 1 : 0

  secret_id                = aws_secretsmanager_secret.sasl_users[0].id
  secret_string_wo         = var.sasl_users_json
  secret_string_wo_version = var.sasl_users_version

  lifecycle {
    precondition {
      condition     = var.sasl_users_json != null
      error_message = "enable_sasl = true needs sasl_users_json."
    }
  }
}
