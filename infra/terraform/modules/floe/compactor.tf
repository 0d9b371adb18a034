# Optional: the compactor (`floe compactor run`) as one Fargate task. It merges
# small objects, enforces retention and deletes orphans; one instance is enough
# (its metastore swaps are compare-and-swap, so a brief overlap during a
# deployment is safe).

resource "aws_security_group" "compactor" {
  count = var.enable_compactor ? 1 : 0

  name_prefix = "${var.name}-compactor-"
  description = "Floe compactor: no inbound traffic"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-compactor" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "compactor_https" {
  count = var.enable_compactor ? 1 : 0

  security_group_id = aws_security_group.compactor[0].id
  description       = "HTTPS to AWS APIs (S3, Secrets Manager, ECR, CloudWatch Logs)"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "compactor_postgres" {
  count = var.enable_compactor ? 1 : 0

  security_group_id            = aws_security_group.compactor[0].id
  description                  = "PostgreSQL metastore"
  referenced_security_group_id = aws_security_group.database.id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

resource "aws_vpc_security_group_ingress_rule" "database_from_compactor" {
  count = var.enable_compactor ? 1 : 0

  security_group_id            = aws_security_group.database.id
  description                  = "PostgreSQL from the compactor"
  referenced_security_group_id = aws_security_group.compactor[0].id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

resource "aws_ecs_task_definition" "compactor" {
  count = var.enable_compactor ? 1 : 0

  family                   = "${var.name}-compactor"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.compactor_cpu
  memory                   = var.compactor_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.compactor[0].arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  container_definitions = jsonencode([
    {
      name      = "compactor"
      image     = var.agent_image
      essential = true
      command   = ["compactor", "run"]

      environment = [
        { name = "FLOE_OBJECTS", value = local.objects_url },
      ]
      secrets = [
        { name = "FLOE_METASTORE", valueFrom = aws_secretsmanager_secret.metastore_dsn.arn },
      ]

      stopTimeout            = 60
      readonlyRootFilesystem = true

      logConfiguration = {
        logDriver = "awslogs"
        options = {
          "awslogs-group"         = aws_cloudwatch_log_group.floe.name
          "awslogs-region"        = local.region
          "awslogs-stream-prefix" = "compactor"
        }
      }
    }
  ])

  tags = local.tags
}

resource "aws_ecs_service" "compactor" {
  count = var.enable_compactor ? 1 : 0

  name            = "${var.name}-compactor"
  cluster         = aws_ecs_cluster.floe.id
  task_definition = aws_ecs_task_definition.compactor[0].arn
  launch_type     = "FARGATE"
  desired_count   = 1

  # Stop the old compactor before starting the new one.
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100

  network_configuration {
    subnets          = values(var.agent_subnets)
    security_groups  = [aws_security_group.compactor[0].id]
    assign_public_ip = false
  }

  propagate_tags = "SERVICE"
  tags           = local.tags
}
