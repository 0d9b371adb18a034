variable "region" {
  description = "AWS region to deploy into."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Name prefix of the deployment's resources."
  type        = string
  default     = "floe"
}

variable "vpc_id" {
  description = "Existing VPC to deploy into (with a NAT gateway or VPC endpoints for S3, Secrets Manager, ECR and CloudWatch Logs)."
  type        = string
}

variable "agent_subnets" {
  description = "Private subnet per availability zone, keyed by AZ name, e.g. { \"us-east-1a\" = \"subnet-aaa\", \"us-east-1b\" = \"subnet-bbb\" }."
  type        = map(string)
}

variable "client_cidr_blocks" {
  description = "CIDR blocks of the Kafka clients."
  type        = list(string)
}

variable "agent_image" {
  description = "Floe image built from the repository's Dockerfile and pushed to a registry, with an immutable tag."
  type        = string
}

variable "database_engine" {
  description = "\"rds\" or \"aurora\"."
  type        = string
  default     = "rds"
}

variable "postgres_version" {
  description = "PostgreSQL version (Aurora needs major.minor, e.g. \"16.4\")."
  type        = string
  default     = "16"
}

variable "aurora_instance_count" {
  description = "Aurora only: number of instances."
  type        = number
  default     = 2
}

variable "db_password_version" {
  description = "Bump to generate a new database password and rewrite the DSN secret."
  type        = number
  default     = 1
}

variable "internal_token_version" {
  description = "Bump to generate a new peer credential (FLOE_PEER_TOKEN) for the agents."
  type        = number
  default     = 1
}

variable "enable_compactor" {
  description = "Run the compactor service."
  type        = bool
  default     = false
}

variable "enable_sasl" {
  description = "Authenticate clients with SASL (PLAIN users from sasl_users_json, SCRAM users in the metastore)."
  type        = bool
  default     = false
}

variable "sasl_users_json" {
  description = "SASL users as a JSON object {\"user\": \"password\"}; pass with TF_VAR_sasl_users_json. Ephemeral: never stored in state."
  type        = string
  default     = null
  sensitive   = true
  ephemeral   = true
}

variable "super_users" {
  description = "Kafka super users (super.users) of the ACL authorizer, which enable_sasl turns on: e.g. [\"User:admin\"] with admin a PLAIN user of sasl_users_json."
  type        = list(string)
  default     = []
}

variable "authorizer" {
  description = "\"acl\" or \"none\"; null = acl exactly when enable_sasl."
  type        = string
  default     = null
}

variable "advertised_hosts" {
  description = "Per-AZ DNS names (your aliases of <az>.<nlb dns>) that each zone's agents advertise, so the TLS certificate can name them before the first apply."
  type        = map(string)
  default     = {}
}

variable "bootstrap_host" {
  description = "Your DNS name for the NLB (bootstrap.servers); null = the NLB's DNS name."
  type        = string
  default     = null
}

variable "internal_token_secret_arn" {
  description = "An existing Secrets Manager secret holding the agents' peer credential (FLOE_PEER_TOKEN); null = the generated one."
  type        = string
  default     = null
}

variable "enable_tls" {
  description = "TLS on the agents' Kafka listener (SSL, or SASL_SSL with enable_sasl); needs tls_certificate_pem and tls_private_key_pem."
  type        = bool
  default     = false
}

variable "tls_certificate_pem" {
  description = "PEM certificate chain naming the hosts clients connect to (bootstrap_host and advertised_hosts, else the NLB's DNS name and <az>.<nlb dns>); pass with TF_VAR_tls_certificate_pem. Ephemeral."
  type        = string
  default     = null
  sensitive   = true
  ephemeral   = true
}

variable "tls_private_key_pem" {
  description = "PEM private key of tls_certificate_pem; pass with TF_VAR_tls_private_key_pem. Ephemeral."
  type        = string
  default     = null
  sensitive   = true
  ephemeral   = true
}

variable "kms_key_arn" {
  description = "Optional customer-managed KMS key for the bucket, the database and the secrets."
  type        = string
  default     = null
}

variable "production" {
  description = "false = a throw-away environment: no deletion protection, no final snapshot, bucket destroyable."
  type        = bool
  default     = true
}

variable "enable_alarms" {
  description = "SNS topic and CloudWatch alarms (agents failing /readyz, metastore CPU and storage)."
  type        = bool
  default     = true
}

variable "alarm_emails" {
  description = "E-mail addresses subscribed to the alarm topic."
  type        = list(string)
  default     = []
}

variable "alarm_db_cpu_percent" {
  description = "Metastore CPU (%) above which the alarm fires."
  type        = number
  default     = 80
}

variable "alarm_db_free_storage_bytes" {
  description = "Metastore free storage (bytes) below which the alarm fires."
  type        = number
  default     = 5368709120
}

variable "alarm_commit_latency_ms" {
  description = "Alarm when the agents' metastore commit p99 stays above this many ms for 3 minutes."
  type        = number
  default     = 250
}

variable "autoscaling_produce_requests_per_task" {
  description = "Target Produce requests per second per agent task (scaling beside CPU); null: CPU only."
  type        = number
  default     = 2000
}

variable "s3_endpoint_route_table_ids" {
  description = "Route tables of the agent subnets for an S3 gateway VPC endpoint (empty: none)."
  type        = list(string)
  default     = []
}

variable "journal_zones" {
  description = "Availability zone IDs (e.g. [\"use1-az4\", \"use1-az5\", \"use1-az6\"]) of the journal tier's directory buckets; empty: no journal."
  type        = list(string)
  default     = []
}

variable "journal_quorum" {
  description = "Journal buckets that must hold a journal object before produce is acknowledged."
  type        = number
  default     = 2
}
