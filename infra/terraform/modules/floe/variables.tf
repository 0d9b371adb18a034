# Inputs of the Floe module. Every variable is used and documented; the agent's
# FLOE_* environment built from them lives in one place: locals.tf
# (local.agent_environment), which tests/infra renders and boots a real agent with.

# -- naming and network -----------------------------------------------------------

variable "name" {
  description = "Name prefix of every resource (load balancer, target groups, ECS cluster, DB identifier). Lowercase letters, digits and hyphens, 3-24 characters."
  type        = string
  default     = "floe"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,22}[a-z0-9]$", var.name))
    error_message = "name must be 3-24 characters of lowercase letters, digits and hyphens, starting with a letter (load balancer and target group names are limited to 32 characters)."
  }
}

variable "tags" {
  description = "Tags added to every resource that supports them."
  type        = map(string)
  default     = {}
}

variable "vpc_id" {
  description = "VPC the agents, the load balancer and the database live in."
  type        = string

  validation {
    condition     = can(regex("^vpc-[0-9a-f]+$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123abcd."
  }
}

variable "agent_subnets" {
  description = "Private subnet of each availability zone the agents run in, keyed by AZ name (e.g. { \"us-east-1a\" = \"subnet-...\" }). One ECS service per entry; its tasks get FLOE_ZONE set to the key and advertise the load balancer's zonal DNS name. At least two zones (RDS needs two)."
  type        = map(string)

  validation {
    condition     = length(var.agent_subnets) >= 2
    error_message = "agent_subnets needs at least two availability zones (RDS subnet groups and zone-aware serving need them)."
  }
  validation {
    condition     = alltrue([for az in keys(var.agent_subnets) : can(regex("^[a-z]{2}(-[a-z]+)+-[0-9][a-z]$", az))])
    error_message = "agent_subnets keys must be availability zone names such as us-east-1a: they become FLOE_ZONE and the NLB zonal DNS prefix."
  }
  validation {
    condition     = alltrue([for s in values(var.agent_subnets) : can(regex("^subnet-[0-9a-f]+$", s))])
    error_message = "agent_subnets values must be subnet ids (subnet-...)."
  }
}

variable "load_balancer_subnets" {
  description = "Subnets of the network load balancer, one per agent AZ. null = the agent subnets (an internal NLB). Give public subnets together with load_balancer_internal = false to expose Kafka to the internet."
  type        = list(string)
  default     = null
}

variable "database_subnet_ids" {
  description = "Subnets of the RDS subnet group (two AZs or more). null = the agent subnets."
  type        = list(string)
  default     = null
}

variable "load_balancer_internal" {
  description = "Whether the network load balancer is internal (reachable from the VPC and peered networks only)."
  type        = bool
  default     = true
}

variable "load_balancer_deletion_protection" {
  description = "Enable deletion protection on the network load balancer."
  type        = bool
  default     = true
}

variable "client_cidr_blocks" {
  description = "CIDR blocks of the Kafka clients allowed to reach the load balancer's Kafka listeners."
  type        = list(string)

  validation {
    condition     = length(var.client_cidr_blocks) > 0 && alltrue([for c in var.client_cidr_blocks : can(cidrhost(c, 0))])
    error_message = "client_cidr_blocks must be a non-empty list of CIDR blocks."
  }
}

# -- agents -----------------------------------------------------------------------

variable "agent_image" {
  description = "Container image of the Floe agent (built from the repository's Dockerfile), e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/floe:0.1.0. Pin a tag or digest: a rolling upgrade is a change of this value."
  type        = string

  validation {
    condition     = length(var.agent_image) > 0 && !endswith(var.agent_image, ":latest")
    error_message = "agent_image must be set and must not use the :latest tag (rolling upgrades need an immutable tag or digest)."
  }
}

variable "kafka_port" {
  description = "Kafka port: the agents' listener (FLOE_PORT) and the load balancer's bootstrap listener. Zone z (in sorted AZ order, from 0) also gets a listener on kafka_port + 1 + z, which its agents advertise."
  type        = number
  default     = 9092

  validation {
    condition     = var.kafka_port >= 1024 && var.kafka_port <= 65000
    error_message = "kafka_port must be between 1024 and 65000 (the image runs as a non-root user; zone listeners use the ports just above)."
  }
}

variable "admin_port" {
  description = "Agent admin HTTP port (FLOE_ADMIN_PORT) serving /healthz (load balancer health checks) and /metrics (Prometheus)."
  type        = number
  default     = 9644

  validation {
    condition     = var.admin_port >= 1024 && var.admin_port <= 65535
    error_message = "admin_port must be between 1024 and 65535."
  }
}

variable "cluster_id" {
  description = "Kafka cluster id the agents report (FLOE_CLUSTER_ID). null = the name variable."
  type        = string
  default     = null
}

variable "agent_workers" {
  description = "Agent processes per task (floe agent --workers, FLOE_WORKERS): each a full agent in the ring with its own segments, cache and metastore pool, sharing the Kafka port; worker i serves admin HTTP on admin_port + i. 0 = one per vCPU of agent_cpu (at least 1): one agent process uses about one core."
  type        = number
  default     = 0

  validation {
    condition     = var.agent_workers >= 0 && var.agent_workers <= 64 && floor(var.agent_workers) == var.agent_workers
    error_message = "agent_workers must be a whole number from 0 (one per vCPU) to 64."
  }
}

variable "agent_cpu" {
  description = "Fargate CPU units per agent task (1024 = 1 vCPU). An agent process uses about one core: see docs/operations.md for MB/s per vCPU."
  type        = number
  default     = 1024

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.agent_cpu)
    error_message = "agent_cpu must be a Fargate CPU size: 256, 512, 1024, 2048, 4096, 8192 or 16384."
  }
}

variable "agent_memory" {
  description = "Fargate memory (MiB) per agent task. Must hold the produce buffer (256 MiB budget) plus the fetch cache (fetch_cache_bytes) plus ~300 MiB for Python."
  type        = number
  default     = 2048

  validation {
    condition     = var.agent_memory >= 512 && var.agent_memory <= 122880
    error_message = "agent_memory must be between 512 and 122880 MiB."
  }
}

variable "cpu_architecture" {
  description = "CPU architecture of the Fargate tasks: X86_64 or ARM64 (Graviton, cheaper; the image must be built for it)."
  type        = string
  default     = "X86_64"

  validation {
    condition     = contains(["X86_64", "ARM64"], var.cpu_architecture)
    error_message = "cpu_architecture must be X86_64 or ARM64."
  }
}

variable "agents_per_zone" {
  description = "Initial number of agent tasks in each zone (autoscaling moves it between agents_min_per_zone and agents_max_per_zone)."
  type        = number
  default     = 1

  validation {
    condition     = var.agents_per_zone >= 1
    error_message = "agents_per_zone must be at least 1."
  }
}

variable "agents_min_per_zone" {
  description = "Autoscaling floor: agent tasks per zone."
  type        = number
  default     = 1

  validation {
    condition     = var.agents_min_per_zone >= 1
    error_message = "agents_min_per_zone must be at least 1 (each zone's listener needs an agent)."
  }
}

variable "agents_max_per_zone" {
  description = "Autoscaling ceiling: agent tasks per zone."
  type        = number
  default     = 4

  validation {
    condition     = var.agents_max_per_zone >= 1 && var.agents_max_per_zone <= 100
    error_message = "agents_max_per_zone must be between 1 and 100."
  }
}

variable "autoscaling_produce_requests_per_task" {
  description = "Target Produce requests per second per agent task (the agents' ProduceRequestsPerSecond metric, averaged over a zone's tasks) for a second target-tracking policy beside CPU: ECS scales out when either asks. null: CPU only."
  type        = number
  default     = 2000

  validation {
    condition     = var.autoscaling_produce_requests_per_task == null || try(var.autoscaling_produce_requests_per_task > 0, false)
    error_message = "autoscaling_produce_requests_per_task must be positive (or null)."
  }
}

variable "cloudwatch_namespace" {
  description = "CloudWatch namespace of the agents' own metrics (Embedded Metric Format on stdout, dimensions ClusterId and Zone)."
  type        = string
  default     = "Floe"
}

variable "autoscaling_cpu_target" {
  description = "Target average CPU utilisation (percent) of each zone's agent service for target-tracking autoscaling."
  type        = number
  default     = 60

  validation {
    condition     = var.autoscaling_cpu_target >= 10 && var.autoscaling_cpu_target <= 90
    error_message = "autoscaling_cpu_target must be between 10 and 90."
  }
}

variable "flush_bytes" {
  description = "FLOE_FLUSH_BYTES: an agent closes and uploads its open segment at this size. Larger = fewer PUTs, more latency under load."
  type        = number
  default     = 8388608

  validation {
    condition     = var.flush_bytes >= 65536
    error_message = "flush_bytes must be at least 64 KiB."
  }
}

variable "flush_interval_ms" {
  description = "FLOE_FLUSH_INTERVAL_MS: an agent uploads its open segment after this long. Sets the floor of produce latency (p50 ~ this value) and the PUT rate at low throughput (1000/flush_interval_ms PUTs/s per agent)."
  type        = number
  default     = 250

  validation {
    condition     = var.flush_interval_ms >= 10 && var.flush_interval_ms <= 10000
    error_message = "flush_interval_ms must be between 10 and 10000."
  }
}

variable "fetch_cache_bytes" {
  description = "FLOE_FETCH_CACHE_BYTES: in-memory block cache of each agent. Counts against agent_memory."
  type        = number
  default     = 268435456

  validation {
    condition     = var.fetch_cache_bytes >= 16777216
    error_message = "fetch_cache_bytes must be at least 16 MiB."
  }
}

variable "auto_create_topics" {
  description = "FLOE_AUTO_CREATE_TOPICS: create unknown topics on Metadata/Produce (Kafka's auto.create.topics.enable)."
  type        = bool
  default     = false
}

variable "default_partitions" {
  description = "FLOE_DEFAULT_PARTITIONS: partitions of auto-created topics."
  type        = number
  default     = 6

  validation {
    condition     = var.default_partitions >= 1
    error_message = "default_partitions must be at least 1."
  }
}

# -- object storage ---------------------------------------------------------------

variable "bucket_name" {
  description = "Name of the S3 bucket created for Floe's objects. null = a unique name generated from the name variable."
  type        = string
  default     = null

  validation {
    condition     = var.bucket_name == null || can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name."
  }
}

variable "object_prefix" {
  description = "Key prefix of Floe's objects in the bucket (FLOE_OBJECTS = s3://bucket/prefix). The agents' IAM role is limited to this prefix."
  type        = string
  default     = "floe"

  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*$", var.object_prefix))
    error_message = "object_prefix must be a non-empty key prefix without leading or trailing slashes."
  }
}

variable "bucket_force_destroy" {
  description = "Allow terraform destroy to delete a non-empty bucket (all topic data). Keep false in production."
  type        = bool
  default     = false
}

variable "kms_key_arn" {
  description = "Customer-managed KMS key for the bucket (SSE-KMS), the database storage and the secrets. null = SSE-S3 (AES256) for the bucket and AWS-managed keys elsewhere."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN."
  }
}

variable "abort_incomplete_multipart_days" {
  description = "Lifecycle rule: abort incomplete multipart uploads after this many days (orphan safety; Floe itself uses single PUTs)."
  type        = number
  default     = 1

  validation {
    condition     = var.abort_incomplete_multipart_days >= 1
    error_message = "abort_incomplete_multipart_days must be at least 1."
  }
}

variable "tmp_expiration_days" {
  description = "Lifecycle rule: expire objects under <object_prefix>/tmp/ (scratch space; never referenced by the metastore) after this many days."
  type        = number
  default     = 2

  validation {
    condition     = var.tmp_expiration_days >= 1
    error_message = "tmp_expiration_days must be at least 1."
  }
}

# -- journal tier (issue 40) -------------------------------------------------------

variable "journal_zones" {
  description = "Availability zone IDs (not names: e.g. [\"use1-az4\", \"use1-az5\", \"use1-az6\"]; `aws ec2 describe-availability-zones` maps names to IDs) of the journal tier: one S3 Express One Zone directory bucket per zone, named <journal_bucket_base>--<zone id>--x-s3. The agents write each journal object to all of them and acknowledge a produce once journal_quorum hold it (FLOE_JOURNAL, FLOE_JOURNAL_QUORUM). Empty: no journal (produce is acknowledged after the standard bucket's PUT)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for z in var.journal_zones : can(regex("^[a-z]+[0-9]+-az[0-9]+$", z))])
    error_message = "journal_zones must be availability zone IDs such as use1-az4 (not AZ names such as us-east-1a: directory buckets are placed by zone ID)."
  }
  validation {
    condition     = length(distinct(var.journal_zones)) == length(var.journal_zones)
    error_message = "journal_zones must be distinct: two journal buckets in one zone do not survive the loss of that zone, which is what the quorum is for."
  }
}

variable "journal_quorum" {
  description = "FLOE_JOURNAL_QUORUM: journal buckets that must hold a journal object before its produce requests are acknowledged. 1 to the number of journal_zones (2 of 3: one zone may be down or slow without stalling produce)."
  type        = number
  default     = 2

  validation {
    condition     = var.journal_quorum >= 1 && floor(var.journal_quorum) == var.journal_quorum && (length(var.journal_zones) == 0 || var.journal_quorum <= length(var.journal_zones))
    error_message = "journal_quorum must be a whole number from 1 to the number of journal_zones: a quorum larger than the zones could never be reached, so no produce would ever be acknowledged."
  }
}

variable "journal_bucket_base" {
  description = "Name base of the journal directory buckets (<base>--<zone id>--x-s3; directory bucket names are unique per zone across AWS). null = <name>-journal-<8 hex characters derived from the object bucket's name>."
  type        = string
  default     = null

  validation {
    condition     = var.journal_bucket_base == null || can(regex("^[a-z0-9]([a-z0-9-]{1,43}[a-z0-9])$", var.journal_bucket_base))
    error_message = "journal_bucket_base must be 3-45 lowercase letters, digits and hyphens, starting and ending with a letter or digit (the zone suffix --<zone id>--x-s3 must still fit in 63 characters)."
  }
}

variable "journal_expiration_days" {
  description = "Lifecycle safety net of the journal buckets: expire objects under <object_prefix>/ this many days after creation. Floe deletes journal objects itself minutes after consolidating them, so this only removes what a crash left behind; it must exceed any consolidation outage, because until consolidated a journal object holds acknowledged data."
  type        = number
  default     = 7

  validation {
    condition     = var.journal_expiration_days >= 2 && floor(var.journal_expiration_days) == var.journal_expiration_days
    error_message = "journal_expiration_days must be a whole number of days, at least 2: a shorter rule could delete journal objects that are not consolidated yet."
  }
}

# -- metastore (PostgreSQL) ---------------------------------------------------------

variable "database_engine" {
  description = "Metastore database: \"rds\" (one RDS for PostgreSQL instance, Multi-AZ by default) or \"aurora\" (an Aurora PostgreSQL cluster)."
  type        = string
  default     = "rds"

  validation {
    condition     = contains(["rds", "aurora"], var.database_engine)
    error_message = "database_engine must be \"rds\" or \"aurora\"."
  }
}

variable "postgres_version" {
  description = "PostgreSQL engine version (major or major.minor, e.g. \"16\" or \"16.4\"); the parameter group family follows the major version. 14 or newer."
  type        = string
  default     = "16"

  validation {
    condition     = can(regex("^[0-9]+(\\.[0-9]+)?$", var.postgres_version)) && tonumber(split(".", var.postgres_version)[0]) >= 14
    error_message = "postgres_version must be 14 or newer, written as major or major.minor."
  }
}

variable "db_instance_class" {
  description = "Instance class of the RDS instance or of each Aurora instance. The commit path is one short transaction per flushed object: CPU and commit latency matter more than memory."
  type        = string
  default     = "db.m7g.large"

  validation {
    condition     = startswith(var.db_instance_class, "db.")
    error_message = "db_instance_class must be an RDS instance class (db.*)."
  }
}

variable "db_allocated_storage" {
  description = "RDS only: initial gp3 storage in GiB (storage autoscaling grows it up to db_max_allocated_storage)."
  type        = number
  default     = 50

  validation {
    condition     = var.db_allocated_storage >= 20
    error_message = "db_allocated_storage must be at least 20 GiB."
  }
}

variable "db_max_allocated_storage" {
  description = "RDS only: storage autoscaling ceiling in GiB."
  type        = number
  default     = 500

  validation {
    condition     = var.db_max_allocated_storage >= 20
    error_message = "db_max_allocated_storage must be at least 20 GiB."
  }
}

variable "db_multi_az" {
  description = "RDS only: run a synchronous standby in a second AZ (failover in 1-2 minutes; produce requests wait meanwhile)."
  type        = bool
  default     = true
}

variable "aurora_instance_count" {
  description = "Aurora only: number of instances in the cluster (1 writer + readers as failover targets). 2 or more for high availability."
  type        = number
  default     = 2

  validation {
    condition     = var.aurora_instance_count >= 1 && var.aurora_instance_count <= 15
    error_message = "aurora_instance_count must be between 1 and 15."
  }
}

variable "db_name" {
  description = "Name of the metastore database."
  type        = string
  default     = "floe"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_]{0,62}$", var.db_name))
    error_message = "db_name must start with a letter and contain lowercase letters, digits and underscores."
  }
}

variable "db_sslmode" {
  description = "libpq sslmode of the metastore DSN. verify-full (default) checks the server certificate against db_ca_bundle_path and its name against the endpoint; the parameter group also sets rds.force_ssl."
  type        = string
  default     = "verify-full"

  validation {
    condition     = contains(["verify-full", "verify-ca", "require"], var.db_sslmode)
    error_message = "db_sslmode must be verify-full, verify-ca or require (the database refuses unencrypted connections)."
  }
}

variable "db_ca_bundle_path" {
  description = "Path, inside the image, of the CA bundle that signs the database's certificate (the image carries the Amazon RDS global bundle here)."
  type        = string
  default     = "/etc/floe/rds-global-bundle.pem"

  validation {
    condition     = can(regex("^/[A-Za-z0-9._/-]+$", var.db_ca_bundle_path))
    error_message = "db_ca_bundle_path must be an absolute path of letters, digits, '.', '_', '-' and '/'."
  }
}

variable "db_username" {
  description = "Master user of the metastore database (the agents connect as this user)."
  type        = string
  default     = "floe"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_]{0,62}$", var.db_username)) && !contains(["admin", "postgres", "rdsadmin"], var.db_username)
    error_message = "db_username must start with a letter, contain lowercase letters, digits and underscores, and not be a reserved name."
  }
}

variable "db_password" {
  description = "Master password of the metastore database. Ephemeral and write-only: it is set on the database and in the DSN secret but never stored in Terraform state. Generate it with the aws_secretsmanager_random_password ephemeral resource (see examples/basic). Applied only when db_password_version changes."
  type        = string
  sensitive   = true
  ephemeral   = true

  validation {
    condition     = length(var.db_password) >= 16
    error_message = "db_password must be at least 16 characters."
  }
}

variable "db_password_version" {
  description = "Bump to rotate: the database password and the metastore DSN secret are rewritten (with the current db_password) only when this number changes. Bump it too after the database endpoint changes (e.g. switching database_engine)."
  type        = number
  default     = 1

  validation {
    condition     = var.db_password_version >= 1 && floor(var.db_password_version) == var.db_password_version
    error_message = "db_password_version must be a positive integer."
  }
}

variable "internal_token" {
  description = "The agents' peer credential (agent to agent: block cache /blocks, group relay /kafka), the same on every agent, injected as FLOE_PEER_TOKEN from the Secrets Manager secret the module creates. It grants peer rights only: the planning API authenticates Kafka principals itself, and the agents talk to PostgreSQL, not to floe metastore serve. Ephemeral and write-only (never in state); generate it with the aws_secretsmanager_random_password ephemeral resource (see examples/basic). Written when internal_token_version changes. Required unless internal_token_secret_arn is set."
  type        = string
  default     = null
  sensitive   = true
  ephemeral   = true

  validation {
    # try(): null (internal_token_secret_arn in use) passes; Terraform does not short-circuit ||.
    condition     = try(length(var.internal_token) >= 32, true)
    error_message = "internal_token must be at least 32 characters."
  }
}

variable "internal_token_secret_arn" {
  description = "ARN of an existing Secrets Manager secret holding the agents' peer credential (a plain string, >= 32 characters), injected as FLOE_PEER_TOKEN instead of a module-created secret: for a credential with its own rotation schedule or managed outside Terraform. The execution role is allowed to read it (and kms_key_arn to decrypt it). null (default): the module creates the secret from internal_token."
  type        = string
  default     = null

  validation {
    condition     = var.internal_token_secret_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:", var.internal_token_secret_arn))
    error_message = "internal_token_secret_arn must be a Secrets Manager secret ARN."
  }
}

variable "internal_token_version" {
  description = "Bump to rewrite the peer credential secret from internal_token (then force a new deployment: every agent must hold the same credential)."
  type        = number
  default     = 1

  validation {
    condition     = var.internal_token_version >= 1 && floor(var.internal_token_version) == var.internal_token_version
    error_message = "internal_token_version must be a positive integer."
  }
}

variable "db_backup_retention_days" {
  description = "Automated backup (point-in-time recovery) retention in days."
  type        = number
  default     = 7

  validation {
    condition     = var.db_backup_retention_days >= 1 && var.db_backup_retention_days <= 35
    error_message = "db_backup_retention_days must be between 1 and 35."
  }
}

variable "db_deletion_protection" {
  description = "Enable deletion protection on the database (the metastore holds every offset: losing it loses the log)."
  type        = bool
  default     = true
}

variable "db_skip_final_snapshot" {
  description = "Skip the final snapshot when the database is destroyed. Keep false in production."
  type        = bool
  default     = false
}

# -- optional parts ---------------------------------------------------------------

variable "enable_compactor" {
  description = "Run the compactor (`floe compactor run`) as its own single-task ECS service."
  type        = bool
  default     = false
}

variable "compactor_cpu" {
  description = "Fargate CPU units of the compactor task."
  type        = number
  default     = 1024

  validation {
    condition     = contains([256, 512, 1024, 2048, 4096, 8192, 16384], var.compactor_cpu)
    error_message = "compactor_cpu must be a Fargate CPU size."
  }
}

variable "compactor_concurrency" {
  description = "Merge tasks the compactor runs at once. Its per-task input (FLOE_COMPACTOR_MAX_INPUT_BYTES) is derived from compactor_memory / compactor_concurrency."
  type        = number
  default     = 2

  validation {
    condition     = var.compactor_concurrency >= 1 && var.compactor_concurrency <= 16
    error_message = "compactor_concurrency must be between 1 and 16."
  }
}

variable "compactor_interval_ms" {
  description = "Pause between compactor passes (ms)."
  type        = number
  default     = 10000

  validation {
    condition     = var.compactor_interval_ms >= 1000
    error_message = "compactor_interval_ms must be at least 1000."
  }
}

variable "compactor_max_stall_s" {
  description = "The compactor's container health check fails when no task or pass finished for this long (seconds); ECS then replaces the task."
  type        = number
  default     = 1800

  validation {
    condition     = var.compactor_max_stall_s >= 120
    error_message = "compactor_max_stall_s must be at least 120."
  }
}

variable "compactor_memory" {
  description = "Fargate memory (MiB) of the compactor task (it holds the objects it merges)."
  type        = number
  default     = 4096

  validation {
    condition     = var.compactor_memory >= 512
    error_message = "compactor_memory must be at least 512 MiB."
  }
}

variable "enable_sasl" {
  description = "Authenticate Kafka clients with SASL: the agents' listener becomes SASL_PLAINTEXT (SASL_SSL with enable_tls), the PLAIN users come from Secrets Manager (sasl_users_json -> FLOE_SASL_USERS), SCRAM credentials from the metastore (managed with AlterUserScramCredentials). Also turns the ACL authorizer on (see authorizer; super_users is then required)."
  type        = bool
  default     = false
}

variable "sasl_mechanisms" {
  description = "FLOE_SASL_MECHANISMS: SASL mechanisms the agents accept when enable_sasl is on (OAUTHBEARER also needs FLOE_OAUTH_* settings)."
  type        = string
  default     = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"

  validation {
    condition     = alltrue([for m in split(",", var.sasl_mechanisms) : contains(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], trimspace(m))])
    error_message = "sasl_mechanisms: a comma-separated list of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER."
  }
}

variable "authorizer" {
  description = "FLOE_AUTHORIZER: \"acl\" enforces Kafka ACLs (kept in the metastore, managed with kafka-acls / CreateAcls by a super user) on every request; \"none\" lets every client do everything, including delete topics and reset other users' SCRAM passwords. null (default): \"acl\" when enable_sasl is on, \"none\" otherwise. Turning authentication on turns authorization on, so an enable_sasl cluster is never silently open; set \"none\" explicitly for authentication without ACLs."
  type        = string
  default     = null

  validation {
    condition     = contains(["acl", "none"], coalesce(var.authorizer, "none"))
    error_message = "authorizer must be \"acl\", \"none\" or null (acl exactly when enable_sasl)."
  }
  validation {
    condition     = var.authorizer != "acl" || var.enable_sasl
    error_message = "authorizer = \"acl\" needs enable_sasl = true: without authentication every client is User:ANONYMOUS and ACLs cannot tell clients apart."
  }
}

variable "super_users" {
  description = "FLOE_SUPER_USERS: principals allowed everything when the authorizer is acl (Kafka's super.users), e.g. [\"User:admin\"]. At least one is required with the acl authorizer: a super user creates the first ACLs and SCRAM users (infra/terraform/README.md, \"TLS, SASL and ACLs\"). The simplest first admin is a PLAIN user from sasl_users_json."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.super_users : can(regex("^User:[^;,[:space:]]+$", p))])
    error_message = "super_users entries must be Kafka principals such as User:admin (no ';', ',' or spaces)."
  }
  validation {
    condition     = length(var.super_users) > 0 || coalesce(var.authorizer, var.enable_sasl ? "acl" : "none") != "acl"
    error_message = "the acl authorizer (the default with enable_sasl) needs at least one super user, e.g. super_users = [\"User:admin\"]: nobody else could create ACLs or users. Set authorizer = \"none\" for SASL without ACLs."
  }
}

variable "allow_everyone_if_no_acl_found" {
  description = "FLOE_ALLOW_EVERYONE_IF_NO_ACL_FOUND: with the acl authorizer, allow any authenticated client on a resource that has no ACL at all (Kafka's allow.everyone.if.no.acl.found). Off: a resource without ACLs is for super users only."
  type        = bool
  default     = false
}

variable "advertised_hosts" {
  description = "Host name each zone's agents advertise to clients, keyed by AZ (e.g. { \"us-east-1a\" = \"kafka-a.example.com\" }): your DNS records (CNAME or Route 53 alias) for the NLB's zonal names <az>.<nlb dns>, so the TLS certificate can name hosts you own before the first apply. A zone not listed advertises <az>.<nlb dns>. Clients are sent to <host>:<kafka_port + 1 + z>, so each name must resolve to that zone's NLB address."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for az in keys(var.advertised_hosts) : contains(keys(var.agent_subnets), az)])
    error_message = "advertised_hosts keys must be zones of agent_subnets."
  }
  validation {
    condition     = alltrue([for h in values(var.advertised_hosts) : can(regex("^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$", h))])
    error_message = "advertised_hosts values must be DNS host names."
  }
}

variable "bootstrap_host" {
  description = "Your DNS name for the NLB (CNAME or alias of its DNS name), used in the bootstrap_servers output; the TLS certificate must name it too. null: the NLB's own DNS name."
  type        = string
  default     = null
}

variable "enable_tls" {
  description = "Encrypt Kafka traffic with TLS terminated on the agents (the NLB passes TCP through, so SASL and client certificates reach the agents): the listener becomes SSL (SASL_SSL with enable_sasl). The certificate and key come from Secrets Manager (tls_certificate_pem, tls_private_key_pem) and are written by the agent to an ephemeral task volume at /var/lib/floe/tls (the root filesystem stays read-only). The certificate must name the hosts clients connect to: bootstrap_host (or the NLB's DNS name) and every zone's advertised host (advertised_hosts, or <az>.<nlb dns>)."
  type        = bool
  default     = false
}

variable "tls_certificate_pem" {
  description = "PEM certificate chain of the agents' TLS listener (used when enable_tls). Ephemeral and write-only (never in state); written when tls_version changes."
  type        = string
  default     = null
  sensitive   = true
  ephemeral   = true
}

variable "tls_private_key_pem" {
  description = "PEM private key of tls_certificate_pem (used when enable_tls). Ephemeral and write-only (never in state)."
  type        = string
  default     = null
  sensitive   = true
  ephemeral   = true
}

variable "tls_version" {
  description = "Bump to rewrite the TLS certificate and key secrets (agents pick them up on their next start)."
  type        = number
  default     = 1

  validation {
    condition     = var.tls_version >= 1 && floor(var.tls_version) == var.tls_version
    error_message = "tls_version must be a positive integer."
  }
}

variable "sasl_users_json" {
  description = "SASL users as a JSON object {\"user\": \"password\", ...}. Ephemeral and write-only (never in state); written when sasl_users_version changes. Used only when enable_sasl is true."
  type        = string
  default     = null
  sensitive   = true
  ephemeral   = true
}

variable "sasl_users_version" {
  description = "Bump to rewrite the SASL users secret from sasl_users_json (agents pick it up on their next start: force a new deployment)."
  type        = number
  default     = 1

  validation {
    condition     = var.sasl_users_version >= 1
    error_message = "sasl_users_version must be at least 1."
  }
}

# -- operations -------------------------------------------------------------------

variable "log_retention_days" {
  description = "CloudWatch Logs retention of the agent and compactor logs."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a CloudWatch Logs retention value (1, 3, 5, 7, 14, 30, 60, 90, ...)."
  }
}

variable "secret_recovery_window_days" {
  description = "Days a deleted secret can be restored (0 = delete immediately, for throw-away environments)."
  type        = number
  default     = 7

  validation {
    condition     = var.secret_recovery_window_days == 0 || (var.secret_recovery_window_days >= 7 && var.secret_recovery_window_days <= 30)
    error_message = "secret_recovery_window_days must be 0 or between 7 and 30."
  }
}

variable "container_insights" {
  description = "Enable CloudWatch Container Insights on the ECS cluster (per-task CPU, memory, network metrics)."
  type        = bool
  default     = true
}

# -- alarms and endpoints ------------------------------------------------------------

variable "enable_alarms" {
  description = "Create an SNS topic and CloudWatch alarms (agents failing /readyz per zone, metastore CPU and free storage)."
  type        = bool
  default     = true
}

variable "alarm_emails" {
  description = "E-mail addresses subscribed to the alarm topic (each must confirm the subscription)."
  type        = list(string)
  default     = []
}

variable "alarm_db_cpu_percent" {
  description = "Metastore CPU (%) above which the alarm fires."
  type        = number
  default     = 80
}

variable "alarm_commit_latency_ms" {
  description = "Alarm when the agents' 99th percentile metastore commit latency (CommitLatencyP99, per zone) stays above this many ms for 3 minutes (every acknowledged produce waits for a commit)."
  type        = number
  default     = 250
}

variable "alarm_db_free_storage_bytes" {
  description = "Metastore free storage (bytes) below which the alarm fires."
  type        = number
  default     = 5368709120
}

variable "s3_endpoint_route_table_ids" {
  description = "Route tables of the agent subnets: when set, an S3 gateway VPC endpoint is created on them (free; keeps segment traffic off the NAT gateway). Empty: none (bring your own)."
  type        = list(string)
  default     = []
}
