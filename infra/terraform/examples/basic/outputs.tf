output "bootstrap_servers" {
  description = "bootstrap.servers for Kafka clients (any zone)."
  value       = module.floe.bootstrap_servers
}

output "zone_bootstrap_servers" {
  description = "bootstrap.servers per availability zone, for zone-aware clients."
  value       = module.floe.zone_bootstrap_servers
}

output "bucket_name" {
  description = "S3 bucket holding Floe's objects."
  value       = module.floe.bucket_name
}

output "metastore_dsn_secret_arn" {
  description = "Secrets Manager secret with the metastore DSN."
  value       = module.floe.metastore_dsn_secret_arn
}

output "log_group_name" {
  description = "CloudWatch log group of the agents."
  value       = module.floe.log_group_name
}
