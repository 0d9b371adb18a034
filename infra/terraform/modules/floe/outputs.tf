output "security_protocol" {
  description = "security.protocol clients must use: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (enable_tls, enable_sasl)."
  value       = local.security_protocol
}

output "bootstrap_servers" {
  description = "Kafka bootstrap address (bootstrap.servers) through the NLB, any zone."
  value       = "${local.bootstrap_host}:${var.kafka_port}"
}

output "zone_bootstrap_servers" {
  description = "Zone-aware bootstrap address per availability zone: the NLB's zonal DNS name and that zone's listener. Clients in a zone should use their zone's entry (it is also what that zone's agents advertise)."
  value       = { for zone, port in local.zone_ports : zone => "${local.advertised_hosts[zone]}:${port}" }
}

output "load_balancer_dns_name" {
  description = "DNS name of the network load balancer."
  value       = aws_lb.kafka.dns_name
}

output "bucket_name" {
  description = "Name of the S3 bucket holding Floe's objects."
  value       = aws_s3_bucket.objects.bucket
}

output "bucket_arn" {
  description = "ARN of the S3 bucket holding Floe's objects."
  value       = aws_s3_bucket.objects.arn
}

output "objects_url" {
  description = "FLOE_OBJECTS given to the agents and the compactor."
  value       = local.objects_url
}

output "metastore_dsn_secret_arn" {
  description = "ARN of the Secrets Manager secret holding the metastore DSN (FLOE_METASTORE)."
  value       = aws_secretsmanager_secret.metastore_dsn.arn
}

output "internal_token_secret_arn" {
  description = "ARN of the Secrets Manager secret the agents read their peer credential (FLOE_PEER_TOKEN) from (the module's, or internal_token_secret_arn)."
  value       = local.internal_token_secret_arn
}

output "sasl_users_secret_arn" {
  description = "ARN of the SASL users secret (null unless enable_sasl)."
  value       = var.enable_sasl ? aws_secretsmanager_secret.sasl_users[0].arn : null
}

output "database_endpoint" {
  description = "Host name of the metastore database (writer endpoint for Aurora)."
  value       = local.db_address
}

output "ecs_cluster_name" {
  description = "Name of the ECS cluster."
  value       = aws_ecs_cluster.floe.name
}

output "agent_service_names" {
  description = "ECS service of the agents, per availability zone."
  value       = { for zone, svc in aws_ecs_service.agent : zone => svc.name }
}

output "agent_task_role_arn" {
  description = "IAM role the agents run as (object access under the prefix only)."
  value       = aws_iam_role.agent.arn
}

output "agent_security_group_id" {
  description = "Security group of the agents."
  value       = aws_security_group.agent.id
}

output "log_group_name" {
  description = "CloudWatch log group of the agents and the compactor."
  value       = aws_cloudwatch_log_group.floe.name
}

output "agent_environment" {
  description = "Plain FLOE_* environment of the agents per zone (secrets excluded)."
  value       = { for zone in local.zones : zone => merge(local.agent_environment, local.journal_environment, local.agent_zone_environment[zone]) }
}

output "journal_buckets" {
  description = "Journal tier: directory bucket name per availability zone ID (empty without journal_zones)."
  value       = { for zone, b in aws_s3_directory_bucket.journal : zone => b.bucket }
}

output "journal_urls" {
  description = "Journal tier: FLOE_JOURNAL given to the agents and the compactor, as a list (empty without journal_zones)."
  value       = local.journal_urls
}
